#!/usr/bin/env bash
# Reproduces the lossy-mode table of bench/RESULTS.md: native Open MPI MPI_Allreduce vs the shim
# exact, fp16, CSC 10 %, CSC 10 % + fp16 and CSC 1 % on emulated nodes (bench/README.md), float
# SUM 1..256 MB, not in place. Each mode is one run of allreduce_bench -p, which times native
# (PMPI_Allreduce) and the shim (MPI_Allreduce) in alternating rounds in the same processes; the
# stats report of each run gives the bytes each mode put on the wire. Needs root; build first
# (scripts/build.sh).
# usage: bench/lossy_numbers.sh [RATE (default 1gbit)] [LAYOUT (default 4x2, nodes x ranks per node)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rate=${1:-1gbit}
layout=${2:-4x2}
rounds=${ROUNDS:-3}
cluster=$root/bench/emulated_cluster.sh
nodes=${layout%x*} ppn=${layout#*x}
trap '"$cluster" down' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), $nodes nodes x $ppn ranks, links $rate"
"$cluster" up --nodes "$nodes" --rate "$rate" >/dev/null
modes=${MODES:-"exact fp16 csc0.1 csc0.1+fp16 csc0.01"}
for mode in $modes; do
  compress=none density=0
  case $mode in
    exact) ;;
    fp16|bf16) compress=$mode ;;
    csc*+*) density=${mode#csc}; compress=${density#*+}; density=${density%+*} ;;
    csc*) density=${mode#csc} ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  echo
  echo "## $mode: GFSHIM_COMPRESS=$compress GFSHIM_CSC_DENSITY=$density"
  LD_PRELOAD=$root/build/libgfshim.so GFSHIM_COMPRESS=$compress GFSHIM_CSC_DENSITY=$density \
    GFSHIM_STATS=1 "$cluster" run --ppn "$ppn" -- \
    "$root/build/bench/allreduce_bench" -p -b 1M -e 256M -f 4 -r "$rounds" 2>&1 |
    grep -vE '^# (allreduce_bench|np|type|op|in-place|check|LD_PRELOAD|iters|time|busbw|ratio|mode) |setpgid|GFSHIM STATS (over|path|summary)'
done
