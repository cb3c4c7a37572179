#!/usr/bin/env bash
# Reproduces the lazy-allreduce tables of bench/RESULTS.md: the gradient replay (per-tensor
# MPI_Iallreduce of ResNet-50, AlexNet and BERT-base in backward order, then MPI_Waitall), native
# against the shim in the same processes, with the overlap test (compute for 1.2x the
# communication time between post and wait), on shared memory and on the emulated cluster
# (4 nodes x 2 ranks, 1 Gbit/s links; needs root, skipped otherwise). Build first
# (scripts/build.sh).
# Also the cost of one request of each mechanism (bench/request_cost.c), both MPIs.
# usage: bench/lazy_numbers.sh [ITERATIONS (default 5)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
iterations=${1:-5}
replay=$root/build/bench/gradient_replay
shim=$root/build/libgfshim.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## request mechanism (one process)"
echo "### Open MPI"
"$root/build/bench/request_cost"
if [[ -x $root/build-mpich/bench/request_cost ]]; then
  echo "### MPICH"
  "$root/build-mpich/bench/request_cost"
fi
for np in 2 4; do
  echo
  echo "## latency-bound burst (ten 1 KiB tensors), shared memory, Open MPI, $np ranks"
  mpirun -np "$np" -x LD_PRELOAD="$shim" "$replay" -m burst10x1K -n 200 -w 10
done
# Open MPI's default binding (a core per rank at np 2, a package at np 4) and no binding: native
# per-tensor Iallreduce depends strongly on it.
for binding in default none; do
  bind=()
  [[ $binding == none ]] && bind=(--bind-to none)
  for np in 2 4; do
    echo
    echo "## shared memory, Open MPI, $np ranks, binding: $binding"
    mpirun -np "$np" "${bind[@]}" -x LD_PRELOAD="$shim" -x GFSHIM_STATS=1 "$replay" -m all -n "$iterations" -w 1 -o 1.2 2>&1 |
      grep -vE 'GFSHIM STATS (over|path|summary|passthrough)'
  done
done
if [[ $(id -u) -eq 0 ]] && ip netns list >/dev/null 2>&1; then
  cluster=$root/bench/emulated_cluster.sh
  trap '"$cluster" down' EXIT
  "$cluster" up --nodes 4 --rate 1gbit >/dev/null
  echo
  echo "## emulated cluster, Open MPI, 4 nodes x 2 ranks, 1gbit links"
  LD_PRELOAD=$shim GFSHIM_STATS=1 "$cluster" run --ppn 2 -- "$replay" -m all -n 3 -w 1 -o 1.2 2>&1 |
    grep -vE 'setpgid|GFSHIM STATS (over|path|summary|passthrough)'
  "$cluster" down
fi
