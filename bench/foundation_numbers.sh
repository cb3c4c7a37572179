#!/usr/bin/env bash
# Reproduces the foundation numbers of bench/RESULTS.md: shim ring vs native MPI_Allreduce on
# this machine (shared memory), float SUM, np 2 and 4, Open MPI and MPICH, and the pass-through
# overhead for small calls. Build first (scripts/build.sh). Takes ~10 minutes; run it on a quiet
# machine: every row times native and shim interleaved in the same processes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-7}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for mpi in openmpi mpich; do
  for np in 2 4; do
    echo
    echo "## ring forced at every size (GFSHIM_MIN_BYTES=0): $mpi, np $np"
    GFSHIM_MIN_BYTES=0 "$root/bench/side_by_side.sh" --mpi "$mpi" --np "$np" -- -b 4K -e 256M -f 4 -r "$rounds" \
      | grep -vE '^# (allreduce_bench|np|type|op|in-place|check|LD_PRELOAD|iters|time|busbw|ratio) '
  done
  echo
  echo "## pass-through overhead, default parameters (calls below GFSHIM_MIN_BYTES=256K): $mpi, np 2"
  "$root/bench/side_by_side.sh" --mpi "$mpi" --np 2 -- -b 8 -e 4K -f 2 -r 21 \
    | grep -vE '^# (allreduce_bench|np|type|op|in-place|check|LD_PRELOAD|iters|time|busbw|ratio) '
done
