#!/usr/bin/env bash
# Reproduces the emulated-cluster tables of bench/RESULTS.md: native Open MPI MPI_Allreduce vs
# the shim's ring, 2D torus and auto choice across network-namespace nodes with rate-limited
# links (see bench/README.md), float SUM, 1..256 MB. Each row times native (PMPI_Allreduce) and
# the shim (MPI_Allreduce) interleaved in the same processes. Needs root; build first
# (scripts/build.sh). bench/plot_cluster.sh turns the output into a PNG.
# usage: bench/cluster_numbers.sh [RATE (default 1gbit)] [LAYOUTS (default "4x1 2x2 4x2", nodes x ranks per node)]
# ALGOS (default "ring torus2d auto") lists GFSHIM_ALGO values; "reproducible" runs
# GFSHIM_REPRODUCIBLE=1 (the rank-ordered chain). MAX_BYTES (default 256M) ends the size sweep.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rate=${1:-1gbit}
layouts=${2:-"4x1 2x2 4x2"}
rounds=${ROUNDS:-3}
cluster=$root/bench/emulated_cluster.sh
trap '"$cluster" down' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), links $rate"
for layout in $layouts; do
  nodes=${layout%x*} ppn=${layout#*x}
  "$cluster" up --nodes "$nodes" --rate "$rate" >/dev/null
  for algo in ${ALGOS:-ring torus2d auto}; do
    mode=(GFSHIM_ALGO="$algo")
    [[ $algo == reproducible ]] && mode=(GFSHIM_ALGO=auto GFSHIM_REPRODUCIBLE=1)
    echo
    echo "## $nodes nodes x $ppn ranks, $rate links, ${mode[*]}"
    env LD_PRELOAD="$root/build/libgfshim.so" "${mode[@]}" GFSHIM_STATS=1 \
      "$cluster" run --ppn "$ppn" -- "$root/build/bench/allreduce_bench" -p -b 1M -e "${MAX_BYTES:-256M}" -f 4 -r "$rounds" 2>&1 |
      grep -vE '^# (allreduce_bench|np|type|op|in-place|check|LD_PRELOAD|iters|time|busbw|ratio|mode) |setpgid|GFSHIM STATS (over|path|summary)'
  done
  "$cluster" down
done
