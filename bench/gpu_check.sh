#!/usr/bin/env bash
# The GPU checks of libgfshim, for a machine with one NVIDIA GPU and no MPI (the device machine).
#
#   bench/gpu_check.sh prepare   here (Debian 12, no GPU needed): builds the CUDA variant for
#                                sm_90 and gathers into .gpu-carry/ (git-ignored) what the GPU
#                                machine needs: the tests, the kernel bench, libgfshim.so with its
#                                plugin, and Debian's Open MPI runtime with the libraries it uses
#   bench/gpu_check.sh run       on the GPU machine, from the repository root with .gpu-carry/
#                                beside it: runs, in this order and within ~5 minutes,
#                                  1. gpu_kernels_test  every kernel against its CPU reference
#                                  2. gpu_plugin_test   the NCCL plugin on one-rank groups
#                                  3. gpu_kernel_bench  each kernel against device-to-device copy
#                                  4. gpu_buffers_cuda  under the carried mpirun with the shim,
#                                     np 1, 2 and 4 on the one GPU: checks, then staged time
#                                     against host buffers (several ranks on one GPU cannot use
#                                     NCCL: the shim must find that and stage)
#                                and prints a short table last. Output also goes to $OUT if set.
# Multi-rank NCCL needs one GPU per rank and is not exercised on one GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.gpu-carry"
# shellcheck source=bench/carry_mpi.sh
source "$root/bench/carry_mpi.sh"
mode=${1:-}

prepare() {
  set -e
  local build="$root/build-gpu"
  cmake -S "$root" -B "$build" -DGFSHIM_MPI=openmpi -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gfshim gfshim_cuda gpu_kernels_test \
    gpu_plugin_test gpu_kernel_bench gpu_buffers_cuda
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/lib" "$carry/usr"
  cp "$build/libgfshim.so" "$build/libgfshim_cuda.so" "$carry/lib/"
  cp "$build/cuda/gpu_kernels_test" "$build/cuda/gpu_plugin_test" "$build/bench/gpu_kernel_bench" \
    "$build/tests/gpu_buffers_cuda" "$carry/bin/"
  carry_openmpi "$carry"
  carry_libraries_of "$carry" "$carry"/lib/*.so* "$carry"/bin/*
  du -sh "$carry"
}

run() {
  [[ -d $carry ]] || { echo "gpu_check: no $carry (run 'bench/gpu_check.sh prepare' on the build machine)"; exit 2; }
  local log=${OUT:-/tmp}/gpu_check.log summary=()
  exec > >(tee "$log") 2>&1
  echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  echo "glibc: $(ldd --version | head -1) (the carried binaries were built against Debian 12's 2.36)"
  use_carried_mpis "$carry"
  export GFSHIM_TEST_CUDA_PLUGIN="$carry/lib/libgfshim_cuda.so"  # not the build path baked in
  # NCCL: the plugin dlopens libnccl.so.2; PyTorch's wheel ships one.
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  [[ -n $nccl ]] && export LD_LIBRARY_PATH="$nccl:$LD_LIBRARY_PATH"
  step() {  # name, timeout, command...
    local name=$1 limit=$2 rc steplog passed skipped verdict
    shift 2
    echo; echo "== $name"
    steplog=$(mktemp)
    timeout "$limit" "$@" 2>&1 | tee "$steplog"; rc=${PIPESTATUS[0]}
    # googletest cases that skipped (no usable GPU) are not passes: say how many.
    passed=$(grep -cE '^\[       OK \] [A-Za-z_]+\.' "$steplog")
    skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z_]+\.' "$steplog" | awk '{print $4}' | sort -u | wc -l)
    rm -f "$steplog"
    if [[ $rc == 77 ]] || [[ $rc == 0 && $skipped -gt 0 && $passed == 0 ]]; then
      verdict=skipped
    elif [[ $rc == 0 && $skipped -gt 0 ]]; then
      verdict="ok ($passed passed, $skipped skipped)"
    elif [[ $rc == 0 ]]; then
      verdict=ok
    else
      verdict="FAILED (exit $rc)"
    fi
    summary+=("$(printf '%-34s %s' "$name" "$verdict")")
  }
  step "kernels vs CPU references" 120 "$carry/bin/gpu_kernels_test"
  step "NCCL plugin, one-rank groups" 120 "$carry/bin/gpu_plugin_test"
  step "kernel bandwidth vs D2D copy" 60 "$carry/bin/gpu_kernel_bench"
  local mpirun=("$carry/usr/bin/mpirun" --bind-to none -x LD_LIBRARY_PATH
                -x "LD_PRELOAD=$carry/lib/libgfshim.so" -x GFSHIM_STATS=1 -x GFSHIM_DEBUG=INFO
                -x GFSHIM_DEBUG_SUBSYS=ENGINE)
  for np in 1 2 4; do
    local args=(fused)
    [[ $np == 2 ]] && args+=(time)
    [[ $np == 4 ]] && args+=(mixed pending)
    step "MPI + shim, GPU buffers, np $np" 120 "${mpirun[@]}" -np "$np" "$carry/bin/gpu_buffers_cuda" "${args[@]}"
  done
  echo; echo "== summary"
  printf '%s\n' "${summary[@]}"
}

case $mode in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: bench/gpu_check.sh prepare | run"; exit 2 ;;
esac
