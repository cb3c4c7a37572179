#!/usr/bin/env bash
# The "never slower than native" sweep (issue 17): bench/call_patterns with the shim preloaded
# (default parameters; every GFSHIM_* of the environment is forwarded) under Open MPI and MPICH at
# np 2 and 4. Each table compares the shim (MPI_*) with the MPI itself (PMPI_*) in the same
# processes, in alternating blocks; ratio < 1: the shim is faster.
# A config MPI:NP:noshim runs the same program without the shim (both columns are then the MPI
# alone): the baseline for what the shim's presence costs the MPI's own calls (its thread level,
# its progress hook), which the side-by-side columns cannot show.
# usage: bench/never_slower.sh [--configs "openmpi:2 openmpi:4 mpich:2 mpich:4"] [-- call_patterns args]
# The builds used are build/ and build-mpich/ (libgfshim.so, bench/call_patterns), or
# $OPENMPI_BUILD and $MPICH_BUILD where set (bench/device_sweep.sh).
# Run it on a quiet machine (no build, test or other benchmark at the same time).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
openmpi_build=${OPENMPI_BUILD:-$root/build}
mpich_build=${MPICH_BUILD:-$root/build-mpich}
configs="openmpi:2 openmpi:4 mpich:2 mpich:4"
if [[ ${1:-} == --configs ]]; then configs=$2; shift 2; fi
[[ ${1:-} == -- ]] && shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
forward=()
for var in $(compgen -e | grep '^GFSHIM_' || true); do forward+=("$var"); done
for config in $configs; do
  IFS=: read -r mpi np mode <<<"$config"
  echo "== $mpi, np $np${mode:+, $mode}, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  if [[ $mpi == openmpi ]]; then
    args=(mpirun.openmpi -np "$np" --bind-to none)
    [[ $mode == noshim ]] || args+=(-x "LD_PRELOAD=$openmpi_build/libgfshim.so")
    for var in "${forward[@]}"; do args+=(-x "$var"); done
    "${args[@]}" "$openmpi_build/bench/call_patterns" "$@"
  else
    args=(mpiexec.mpich -n "$np")
    [[ $mode == noshim ]] || args+=(-genv LD_PRELOAD "$mpich_build/libgfshim.so")
    for var in "${forward[@]}"; do args+=(-genv "$var" "${!var}"); done
    "${args[@]}" "$mpich_build/bench/call_patterns" "$@"
  fi
done
