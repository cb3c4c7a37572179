#!/usr/bin/env bash
# The shim's own code at scale on SimGrid SMPI (issue 19): one simulation per point, the shim's
# ring, torus2d and auto against SMPI's implementations of the MPIs' selectors (ompi, mpich) and
# single algorithms, with the cost model's prediction (gfshim-info --model) beside each.
#
# usage: bench/sim/scale.sh [-p PLATFORM] [-n "RANKS ..."] [-s "SIZES ..."] [-a "SHIM_ALGOS"]
#                           [-m "SMPI_ALGOS"] [-j PARALLEL] [-o RESULTS.tsv] [-l SECONDS]
#                           [-x "SMPI_OPTION ..."]
#   PLATFORM   ethernet_10g | ethernet_100g | abci | gradientflow (bench/sim/*.xml)
#        or: bench/sim/scale.sh -t RESULTS.tsv   (the table of earlier runs, no simulation)
#   defaults   -n 64 -s "1M 16M 64M" -a "ring torus2d auto"
#              -m "ompi mpich lr rab_rdb smp_rsag_lr ompi_ring_segmented" -j 2
#              -l 3600 (each simulation's wall-clock limit; 3456 ranks need more, see RESULTS)
#   -x         more SimGrid options for every simulation, e.g. "smpi/send-is-detached-thresh:0"
#              (every message rendezvous; docs/simulation.md, "Small messages")
# Needs build-smpi (scripts/test.sh or cmake -DGFSHIM_MPI=smpi) and build/gfshim-info.
#
# Each point is allreduce_bench (float sum, out of place) with one warm-up and one timed call: the
# simulation is deterministic, so one call is its time. Program buffers are SMPI shared memory
# (smpi/auto-shared-malloc-thresh: every allocation of 64 KiB or more), so thousands of ranks fit;
# the shim's own scratch stays per rank. SMPI maps a shared buffer as copies of one block: 64 MiB
# blocks (smpi/shared-malloc-blocksize) keep 1024 ranks of 64 MB within Linux's 65530 mappings a
# process (with SMPI's 1 MiB they aborted). smpirun copies the program once per rank (dlopen
# privatization) and keeps shared blocks in files in $TMPDIR: scale.sh points it at /dev/shm (a
# tmpfs) unless TMPDIR is set, so the kernel does not write them back to disk. Computation is not
# simulated (smpi/simulate-computation:no): the reduction's CPU time is excluded on both sides and
# the figures are the network's alone (the reduction runs on GPUs at the seeds' scale). A failed
# MPI_Test costs 1 us of simulated time (smpi/test, no growth), the order of a real one. Links are
# ideal at their stated rate and latency: SMPI's default correction factors (calibrated on a TCP
# cluster, which cut small messages' bandwidth by half and more) and cross traffic are off, so both
# sides run on the network the platform file states. (These settings are
# tests/smpi/run_simulated.sh's.) Every collective that is not the one measured (the barrier before
# it, the shim's set-up) takes Open MPI's selection on both sides. The shim's auto is told that
# network: the platform's link figures, no rendezvous handshake (GFSHIM_RENDEZVOUS_US=0, SimGrid
# models none) and a reduction that costs nothing (GFSHIM_REDUCE_GBPS=1e9).
#
# Every GFSHIM_* variable of the environment is passed to the shim's simulated ranks too (after
# the settings above, so it wins), and the model's column reads it as well: for example
# GFSHIM_TORUS_COLUMN=ring for the torus's ring columns where auto would take halving.
#
# Output: one TSV line per simulation appended to RESULTS (default bench/results/sim_scale.tsv)
# as it ends, then a markdown table of the points run now on stdout. The TSV's "chosen" column
# is the algorithm the shim ran, "torus2d/halving" for the torus with columns by recursive
# halving and doubling, "torus2d/split" for its split columns (GFSHIM_TORUS_COLUMN=split).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
platform=ethernet_10g ranks="64" sizes="1M 16M 64M" shim_algos="ring torus2d auto"
smpi_algos="ompi mpich lr rab_rdb smp_rsag_lr ompi_ring_segmented" parallel=2
out=$root/bench/results/sim_scale.tsv
table_only="" limit=3600 options=""
while getopts "p:n:s:a:m:j:o:t:l:x:" opt; do
  case $opt in
    p) platform=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    a) shim_algos=$OPTARG ;;
    m) smpi_algos=$OPTARG ;;
    j) parallel=$OPTARG ;;
    o) out=$OPTARG ;;
    t) table_only=$OPTARG ;;
    l) limit=$OPTARG ;;
    x) options=$OPTARG ;;
    *) sed -n '2,23p' "$0"; exit 2 ;;
  esac
done

# Per platform: ranks per node and the link figures of its XML file (node to node through one
# leaf switch: two links), which the cost model is given as well.
platform_figures() {
  case $1 in
    ethernet_10g) per_node=4 inter_gbps=10 inter_us=10 intra_gbps=96 intra_us=1 ;;
    ethernet_100g) per_node=4 inter_gbps=100 inter_us=4 intra_gbps=96 intra_us=1 ;;
    abci) per_node=4 inter_gbps=200 inter_us=2 intra_gbps=400 intra_us=2 ;;
    gradientflow) per_node=8 inter_gbps=56 inter_us=2 intra_gbps=96 intra_us=1 ;;
    *) echo "scale.sh: unknown platform '$1'" >&2; exit 2 ;;
  esac
}
platform_figures "$platform"
xml=$root/bench/sim/$platform.xml
bench_dir=$root/build-smpi/smpi
info=$root/build/gfshim-info
for f in "$bench_dir/allreduce_bench_shim" "$bench_dir/allreduce_bench_native" "$info"; do
  [[ -x $f ]] || { echo "scale.sh: $f is missing (build it first)" >&2; exit 2; }
done
mkdir -p "$(dirname "$out")"
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi

bytes_of() {
  local v=${1%[KMG]}
  case $1 in *K) echo $((v * 1024)) ;; *M) echo $((v * 1048576)) ;; *G) echo $((v * 1073741824)) ;; *) echo "$v" ;; esac
}

# One simulation: prints "platform ranks bytes side algo time_us chosen wall_s".
one() {
  local np=$1 size=$2 side=$3 algo=$4
  local bytes; bytes=$(bytes_of "$size")
  local program=$bench_dir/allreduce_bench_native envs=() cfgs=(--cfg smpi/allreduce:ompi)
  if [[ $side == shim ]]; then
    program=$bench_dir/allreduce_bench_shim
    envs=(--env "GFSHIM_ALGO=$algo" --env GFSHIM_DEBUG=INFO --env GFSHIM_DEBUG_SUBSYS=POLICY
          --env "GFSHIM_TOPO_FILE=$root/bench/sim/simulated_node.topo"
          --env "GFSHIM_INTER_GBPS=$inter_gbps" --env "GFSHIM_INTER_LATENCY_US=$inter_us"
          --env "GFSHIM_INTRA_GBPS=$intra_gbps" --env "GFSHIM_INTRA_LATENCY_US=$intra_us"
          --env GFSHIM_RENDEZVOUS_US=0 --env GFSHIM_REDUCE_GBPS=1e9)
    local var
    for var in $(compgen -e | grep '^GFSHIM_' || true); do envs+=(--env "$var=${!var}"); done
  else
    cfgs=(--cfg "smpi/allreduce:$algo")
  fi
  local option
  for option in $options; do cfgs+=(--cfg "$option"); done
  local started; started=$(date +%s.%N)
  local cmd=("$root/tests/smpi/run_simulated.sh" --smpirun smpirun --platform "$xml" --np "$np"
             --ranks-per-host "$per_node" --time-limit "$limit" "${envs[@]+"${envs[@]}"}"
             --cfg smpi/coll-selector:ompi "${cfgs[@]}"
             --cfg smpi/auto-shared-malloc-thresh:65536 --cfg smpi/shared-malloc-blocksize:67108864
             -- "$program" -b "$bytes" -e "$bytes" -n 1 -w 1 -r 1)
  local log
  log=$("${cmd[@]}" 2>&1) ||
    { echo "scale.sh: simulation failed: $np $size $side $algo" >&2; echo "$log" | tail -5 >&2; return 0; }
  local wall; wall=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  local time_us; time_us=$(awk -v b="$bytes" '$1 == b { print $5; exit }' <<<"$log")
  local chosen=$algo
  if [[ $side == shim ]]; then
    chosen=$(sed -n 's/.*GFSHIM STATS engine *\([a-z0-9]*\) (.*/\1/p' <<<"$log" | head -1)
    [[ -n $chosen ]] || chosen=native
    if [[ $chosen == torus2d ]] && grep -q "columns by recursive halving and doubling" <<<"$log"; then
      chosen=torus2d/halving
    elif [[ $chosen == torus2d ]] && grep -q "columns split" <<<"$log"; then
      chosen=torus2d/split
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$platform" "$np" "$bytes" "$side" "$algo" \
    "$time_us" "$chosen" "$wall"
}
export -f one bytes_of
export root platform per_node inter_gbps inter_us intra_gbps intra_us xml bench_dir limit options

# The table: per point, every algorithm's time, its share of the node's link limit
# (each node moves 2(nodes-1)/nodes of the buffer in and out through one link), and the model's
# prediction for the shim's algorithms.
table() {
echo "| platform | ranks | bytes | side | algorithm | simulated ms | busbw GB/s | of node limit | model ms | model error | wall s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r platform np bytes side algo time_us chosen wall; do
  platform_figures "$platform"
  nodes=$((np / per_node))
  model="-" err="-"
  if [[ $side == shim && -n $time_us ]]; then
    # The model without the reduction (left out of the simulation too) and without the
    # rendezvous handshake (SimGrid models none); for the torus and the hierarchical allreduce
    # its last row, the pieces the shim takes, the torus's with the column pass it took
    # ("torus2d/halving": recursive halving and doubling; "torus2d/split": a ring among the odd
    # factor of the node count, then halving; "torus2d": the ring).
    local name=${chosen%/*} columns="ring columns"
    [[ $chosen == */halving ]] && columns="halving columns"
    [[ $chosen == */split ]] && columns="split columns"
    predicted=$("$info" --model --ranks-per-node "$per_node" --nodes "$nodes" --bytes "$bytes" \
                  --inter-gbps "$inter_gbps" --inter-latency-us "$inter_us" \
                  --intra-gbps "$intra_gbps" --intra-latency-us "$intra_us" \
                  --reduce-gbps 1e9 --rendezvous-us 0 |
                awk -v n="$name" -v c="$columns" \
                  'index($0, n) == 1 && (n != "torus2d" || index($0, c)) { v = $NF } END { print v }')
    if [[ -n $predicted ]]; then
      model=$(awk -v p="$predicted" 'BEGIN { printf "%.2f", p * 1e3 }')
      err=$(awk -v p="$predicted" -v t="$time_us" 'BEGIN { printf "%+.0f %%", (p * 1e6 / t - 1) * 100 }')
    fi
  fi
  label=$algo
  [[ $side == shim && $chosen != "$algo" ]] && label="$algo -> $chosen"
  awk -v pf="$platform" -v np="$np" -v b="$bytes" -v side="$side" -v a="$label" -v t="$time_us" -v nodes="$nodes" \
      -v g="$inter_gbps" -v m="$model" -v e="$err" -v w="$wall" 'BEGIN {
    if (t == "") { printf "| %s | %d | %d | %s | %s | failed | - | - | %s | %s | %s |\n", pf, np, b, side, a, m, e, w; exit }
    busbw = b / (t * 1e-6) * 2 * (np - 1) / np / 1e9
    limit = 2 * (nodes - 1) / nodes * b / (g * 1e9 / 8)
    printf "| %s | %d | %d | %s | %s | %.2f | %.2f | %.2f | %s | %s | %s |\n", pf, np, b, side, a, t / 1e3, busbw, limit / (t * 1e-6), m, e, w
  }'
done
}

if [[ -n $table_only ]]; then
  table <"$table_only"
  exit 0
fi
jobs=()
for np in $ranks; do
  for size in $sizes; do
    for a in $shim_algos; do jobs+=("$np $size shim $a"); done
    for a in $smpi_algos; do jobs+=("$np $size smpi $a"); done
  done
done
run_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# Each line reaches RESULTS as its simulation ends, so a run stopped early keeps what finished,
# and runs that share RESULTS do not overwrite each other; this run's own lines make the table.
run_lines=$(mktemp)
trap 'rm -f "$run_lines"' EXIT
printf '%s\n' "${jobs[@]}" | xargs -P "$parallel" -L 1 bash -c 'one "$@"' _ |
  tee -a "$out" "$run_lines"
echo
echo "# $platform, started $run_started, $(nproc) cores; one simulation per row"
table <"$run_lines"
