# Sourced by bench/gpu_check.sh and bench/device_sweep.sh: copy Debian's MPI runtimes into a
# folder that travels to the device machine (which has no MPI), and point a shell at that copy.
# Layout of a carry folder C: C/usr/bin (launchers), C/usr/lib/... and C/usr/share, C/etc (Open
# MPI's relocatable tree), C/lib (every shared library the carried programs load, bar glibc and
# the CUDA driver).

# Open MPI 4.1 as Debian lays it out under /usr, relocated with OPAL_PREFIX (see use_carried_mpis).
carry_openmpi() {  # carry folder
  local carry=$1 ompi=/usr/lib/x86_64-linux-gnu/openmpi
  mkdir -p "$carry/usr/bin" "$carry/usr/lib/x86_64-linux-gnu" "$carry/usr/share" "$carry/etc" \
    "$carry/lib"
  cp -a /usr/bin/orterun /usr/bin/orted "$carry/usr/bin/"
  ln -sf orterun "$carry/usr/bin/mpirun"
  ln -sf orterun "$carry/usr/bin/mpirun.openmpi"
  cp -a "$ompi" "$carry/usr/lib/x86_64-linux-gnu/"
  cp -a /usr/share/openmpi "$carry/usr/share/"
  cp -a /etc/openmpi "$carry/etc/"
  cp -aL /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libopen-rte.so.40 \
    /usr/lib/x86_64-linux-gnu/libopen-pal.so.40 "$carry/lib/"
  carry_libraries_of "$carry" "$carry"/usr/bin/orterun "$carry"/usr/bin/orted "$ompi"/lib/openmpi3/*.so
}

# MPICH 4.0 (ch4:ucx, hydra). UCX loads its transports from the ucx/ folder beside libucs.
carry_mpich() {  # carry folder
  local carry=$1
  mkdir -p "$carry/usr/bin" "$carry/lib/ucx"
  cp -a /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy "$carry/usr/bin/"
  ln -sf mpiexec.hydra "$carry/usr/bin/mpiexec.mpich"
  cp -aL /usr/lib/x86_64-linux-gnu/libmpich.so.12 "$carry/lib/"
  cp -aL /usr/lib/x86_64-linux-gnu/ucx/*.so.0 "$carry/lib/ucx/"
  carry_libraries_of "$carry" "$carry"/usr/bin/mpiexec.hydra "$carry"/usr/bin/hydra_pmi_proxy \
    "$carry"/lib/libmpich.so.12 "$carry"/lib/ucx/*.so.0
}

# Every library the given objects load that a bare system may lack (glibc stays the machine's).
carry_libraries_of() {  # carry folder, objects...
  local carry=$1
  shift
  ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda)\.so' |
    while read -r lib; do cp -nL "$lib" "$carry/lib/" 2>/dev/null || true; done
}

# Environment for running the carried MPIs: launchers first on PATH, libraries found, Open MPI
# relocated and allowed to run as root on one node (shared memory, no single-copy mechanism: the
# device machine's container may not allow it).
use_carried_mpis() {  # carry folder
  local carry=$1
  export PATH="$carry/usr/bin:$PATH" LD_LIBRARY_PATH="$carry/lib:${LD_LIBRARY_PATH:-}"
  export OPAL_PREFIX="$carry/usr" OPAL_SYSCONFDIR="$carry/etc/openmpi" \
    OPAL_PKGDATADIR="$carry/usr/share/openmpi" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    PMIX_MCA_pcompress_base_silence_warning=1
}
