#!/usr/bin/env bash
# Builds both MPI flavours (scripts/build.sh) and the Debian package that holds both:
#   /usr/lib/gfshim/openmpi/ and /usr/lib/gfshim/mpich/ (libgfshim.so, libgfshim_cuda.so where
#   CUDA and NCCL were found, gfshim-info), /usr/bin/gfshimrun, /usr/bin/gfshim-info and
#   /usr/share/doc/gfshim/. cpack runs in build/ and takes build-mpich/'s flavour with it
#   (CPACK_INSTALL_CMAKE_PROJECTS, cmake/install.cmake).
#   scripts/package.sh [OUTPUT_DIR]   (default build/package); prints the .deb's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/package}
"$root/scripts/build.sh"
mkdir -p "$out"
rm -f "$out"/libgfshim_*.deb
cpack --config "$root/build/CPackConfig.cmake" -G DEB -B "$out" >"$out/cpack.log" ||
  { cat "$out/cpack.log" >&2; exit 1; }
deb=$(ls "$out"/libgfshim_*.deb)
echo "package: $deb"
echo "install: sudo apt install $deb    remove: sudo apt remove libgfshim"
