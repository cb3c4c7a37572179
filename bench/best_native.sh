#!/usr/bin/env bash
# The bar for the shim on the emulated cluster (issue 18): Open MPI's best algorithm per layout and
# size, not only its default. For every layout it runs bench/allreduce_bench in compare mode once
# per Open MPI configuration, with the shim preloaded at GFSHIM_ALGO=auto, so each run times that
# configuration's MPI_Allreduce (PMPI) and the shim's in the same processes, in alternating
# rounds:
#   default       Open MPI's own selection
#   ring          coll_tuned_allreduce_algorithm 4
#   segring       coll_tuned_allreduce_algorithm 5 (segmented ring)
#   rabenseifner  coll_tuned_allreduce_algorithm 6
#   han           coll_han_priority 100 (hierarchical: node reduce, leaders' allreduce, node bcast)
# Then per size: each configuration's time, the best of them, the shim's (median of its runs),
# shim / best native, and the efficiency against the node limit: 2(N-1)/N x size through one
# node link at TCP goodput (0.956 of the tbf rate, bench/emulated_cluster.sh), seconds / measured.
#
# usage: bench/best_native.sh [RATE (default 1gbit)] [LAYOUTS (default "4x1 2x2 4x2")]
# SIZES (default "16M 64M 256M", one allreduce_bench sweep from the first by factor 4 to the last),
# ROUNDS (default 3), CONFIGS (default "default ring segring rabenseifner han"). Needs root and a
# build (scripts/build.sh); run on a quiet machine. Raw allreduce_bench output goes to
# $RAW_DIR (default /tmp/gfshim-best-native).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rate=${1:-1gbit}
layouts=${2:-"4x1 2x2 4x2"}
read -r -a sizes <<<"${SIZES:-16M 64M 256M}"
rounds=${ROUNDS:-3}
configs=${CONFIGS:-"default ring segring rabenseifner han"}
raw_dir=${RAW_DIR:-/tmp/gfshim-best-native}
cluster=$root/bench/emulated_cluster.sh
mkdir -p "$raw_dir"
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT

mca_of() {
  case $1 in
    default) echo "" ;;
    ring) echo "OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=4" ;;
    segring) echo "OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=5" ;;
    rabenseifner) echo "OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=6" ;;
    han) echo "OMPI_MCA_coll_han_priority=100" ;;
    *) echo "best_native.sh: unknown configuration $1" >&2; exit 2 ;;
  esac
}

# Bytes per second of TCP goodput through one node link.
goodput=$(awk -v r="$rate" 'BEGIN {
  n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
  m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1
  printf "%.6g", n * m * 0.956 / 8 }')

echo "# best_native.sh $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), links $rate, rounds $rounds"
echo "# seconds per MPI_Allreduce (float sum, median of rounds, max over ranks); efficiency = node limit / time"
for layout in $layouts; do
  nodes=${layout%x*} ppn=${layout#*x}
  "$cluster" up --nodes "$nodes" --rate "$rate" >/dev/null
  for config in $configs; do
    raw=$raw_dir/${layout}_${config}.txt
    # The configuration's variables reach the ranks through -x (emulated_cluster.sh forwards
    # OMPI_MCA_*), so the MPI in every rank selects the same algorithm.
    env LD_PRELOAD="$root/build/libgfshim.so" GFSHIM_ALGO=auto $(mca_of "$config") \
      "$cluster" run --ppn "$ppn" -- "$root/build/bench/allreduce_bench" -p \
      -b "${sizes[0]}" -e "${sizes[-1]}" -f 4 -r "$rounds" >"$raw" 2>&1 ||
      { echo "best_native.sh: $layout $config failed, see $raw" >&2; exit 1; }
  done
  "$cluster" down >/dev/null
  echo
  echo "## $nodes nodes x $ppn ranks, $rate links"
  python3 - "$raw_dir" "$layout" "$nodes" "$goodput" $configs <<'PY'
import statistics, sys
raw_dir, layout, nodes, goodput, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
native, shim = {}, {}
for config in configs:
    for line in open(f"{raw_dir}/{layout}_{config}.txt"):
        f = line.split()
        if line.startswith("#") or len(f) < 7 or not f[0].isdigit():
            continue
        size = int(f[0])
        native[size, config] = float(f[4]) / 1e6
        shim.setdefault(size, []).append(float(f[5]) / 1e6)
print(f"{'size':>12}" + "".join(f" {c:>12}" for c in configs) +
      f" {'best':>12} {'shim_auto':>10} {'shim_runs':>11} {'shim/best':>9} {'eff_best':>8} {'eff_shim':>8}")
for size in sorted(shim):
    times = {c: native[size, c] for c in configs if (size, c) in native}
    best = min(times, key=times.get)
    auto = statistics.median(shim[size])
    limit = 2 * (nodes - 1) / nodes * size / goodput
    print(f"{size:>12}" + "".join(f" {times.get(c, float('nan')):>12.4f}" for c in configs) +
          f" {best:>12} {auto:>10.4f} {min(shim[size]):>5.3f}-{max(shim[size]):<5.3f}"
          f" {auto / times[best]:>9.3f} {limit / times[best]:>8.2f} {limit / auto:>8.2f}")
PY
done
