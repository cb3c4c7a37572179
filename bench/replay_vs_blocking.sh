#!/usr/bin/env bash
# The fused path against the blocking engine on the emulated cluster (issue 17): ResNet-50's 161
# gradient MPI_Iallreduce (posted in backward order, then MPI_Waitall; bench/gradient_replay)
# against one blocking MPI_Allreduce of the same 102 MB (bench/allreduce_bench), each native and
# through the shim in the same processes, RUNS times in a row, with the shim's stats (buckets,
# time in its progress). 4 nodes x 2 ranks, 1 Gbit/s links (bench/emulated_cluster.sh; root).
# usage: bench/replay_vs_blocking.sh [RUNS (default 5)]     extra GFSHIM_* variables are forwarded
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
cluster=$root/bench/emulated_cluster.sh
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
"$cluster" up --nodes 4 --rate 1gbit >/dev/null
# UCX reports a veth's nominal speed (9.5 Gbit/s), not the emulated link's: tell the cost model,
# as a user of a rate-limited network would (docs/calls.md, *Topology and the cost model*). With 9.5 it
# predicts a lone MPI_Iallreduce faster as Open MPI's own up to 671K instead of 84K, and sends
# ResNet-50's mid-size gradients there instead of fusing them (1.54-1.60 s a step, not 1.37).
export GFSHIM_INTER_GBPS=${GFSHIM_INTER_GBPS:-1}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), GFSHIM: $(env | grep '^GFSHIM_' | tr '\n' ' ')"
for run in $(seq 1 "$runs"); do
  echo "## run $run: ResNet-50 replay (median of 3 steps)"
  LD_PRELOAD=$root/build/libgfshim.so GFSHIM_STATS=1 "$cluster" run --ppn 2 -- \
    "$root/build/bench/gradient_replay" -m resnet50 -n 3 -w 1 2>&1 |
    grep -E '^ *resnet50|^# check|GFSHIM STATS fusion'
  echo "## run $run: one blocking allreduce of 102228128 bytes (median of 3 rounds)"
  LD_PRELOAD=$root/build/libgfshim.so "$cluster" run --ppn 2 -- \
    "$root/build/bench/allreduce_bench" -p -b 102228128 -e 102228128 -n 1 -r 3 2>&1 |
    grep -vE 'setpgid|^#' | tail -2
done
