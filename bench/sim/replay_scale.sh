#!/usr/bin/env bash
# Lazy fusion against per-tensor allreduces at scale on SimGrid SMPI (issue 19): ResNet-50's
# gradient replay (bench/gradient_replay.c: 161 tensors, 102 MB, posted in backward order, then
# MPI_Waitall) on GradientFlow's cluster (bench/sim/gradientflow.xml, 8 ranks a node, 56 Gbit/s).
# Per number of ranks, one simulation of the per-tensor baseline (gradient_replay -p -c native:
# one blocking allreduce per tensor in backward order, SMPI with Open MPI's selection,
# GradientFlow's baseline), run beside the fused ones, one per algorithm after another
# (-c shim: every call fused, GFSHIM_FUSION_MIN_BYTES=0, the algorithm forced, progressed in the
# application's calls, the shim told the simulated network as in scale.sh). One timed step, no
# warm-up: the simulation is deterministic (the shim's side runs its correctness step first,
# which warms it up).
#
# usage: bench/sim/replay_scale.sh [-n "RANKS ..."] [-a "ALGOS ..."] [-k STEPS] [-o RESULTS.tsv]
#                                  [-l SECONDS] [-x "SMPI_OPTION ..."]
#   defaults  -n "16 64" -a "ring torus2d" -k 1 -l 7200 -o bench/results/sim_replay_scale.tsv
#   -x        more SimGrid options for both columns, e.g. "smpi/send-is-detached-thresh:0" (every
#             message rendezvous; docs/simulation.md, "Small messages")
# Needs build-smpi (scripts/test.sh or cmake -DGFSHIM_MPI=smpi).
#
# Up to 64 ranks every rank has its own gradients and the sums are checked (the "check" column);
# above, the gradients are SMPI shared memory (gradient_replay -s: one buffer for every simulated
# rank, so hundreds of ranks fit in memory; mapped in 64 MiB blocks as in scale.sh) and the check
# is skipped. As in scale.sh, computation
# is not simulated, $TMPDIR is /dev/shm unless set, and the other run_simulated.sh settings hold.
#
# Every GFSHIM_* variable of the environment is passed to the simulated ranks too (after the
# settings above, so it wins): GFSHIM_FUSION_BYTES=16M lets 512 ranks' buckets fit in 24 GB.
#
# Output: one TSV line per algorithm appended to RESULTS and printed: ranks, algorithm, steps,
# per-tensor ms, fused ms, check, wall-clock seconds of the per-tensor and of the fused simulation,
# and the -x options ("-": none).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ranks="16 64" algos="ring torus2d" steps=1 limit=7200 options=""
out=$root/bench/results/sim_replay_scale.tsv
while getopts "n:a:k:o:l:x:" opt; do
  case $opt in
    n) ranks=$OPTARG ;;
    a) algos=$OPTARG ;;
    k) steps=$OPTARG ;;
    o) out=$OPTARG ;;
    l) limit=$OPTARG ;;
    x) options=$OPTARG ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
  esac
done
program=$root/build-smpi/smpi/gradient_replay_shim
[[ -x $program ]] || { echo "replay_scale.sh: $program is missing (build it first)" >&2; exit 2; }
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
mkdir -p "$(dirname "$out")"

# One simulation: gradient_replay's output in $1, then "wall SECONDS" and "status N".
simulate() {
  local out=$1 np=$2 column=$3 algo=$4
  local shared=()
  ((np > 64)) && shared=(-s)
  local started; started=$(date +%s.%N)
  local status=0 forward=() var option
  for var in $(compgen -e | grep '^GFSHIM_' || true); do forward+=(--env "$var=${!var}"); done
  for option in $options; do forward+=(--cfg "$option"); done
  "$root/tests/smpi/run_simulated.sh" --smpirun smpirun \
    --platform "$root/bench/sim/gradientflow.xml" --np "$np" --ranks-per-host 8 \
    --time-limit "$limit" \
    --env "GFSHIM_ALGO=$algo" --env GFSHIM_FUSION_MIN_BYTES=0 \
    --env "GFSHIM_TOPO_FILE=$root/bench/sim/simulated_node.topo" \
    --env GFSHIM_INTER_GBPS=56 --env GFSHIM_INTER_LATENCY_US=2 \
    --env GFSHIM_INTRA_GBPS=96 --env GFSHIM_INTRA_LATENCY_US=1 \
    --env GFSHIM_RENDEZVOUS_US=0 --env GFSHIM_REDUCE_GBPS=1e9 \
    "${forward[@]+"${forward[@]}"}" \
    --cfg smpi/coll-selector:ompi --cfg smpi/shared-malloc-blocksize:67108864 \
    -- "$program" -m resnet50 -n "$steps" -w 0 -p -c "$column" "${shared[@]+"${shared[@]}"}" \
    >"$out" 2>&1 || status=$?
  awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "wall %.0f\n", b - a }' >>"$out"
  echo "status $status" >>"$out"
}

# Column $2 (4: native, 5: shim) of the resnet50 line in $1, or "-" when the simulation failed.
result() {
  local value
  value=$(awk -v c="$2" '$1 == "resnet50" { print $c; exit }' "$1")
  if ! grep -qx "status 0" "$1" || [[ -z $value || $value == - ]]; then
    echo "replay_scale.sh: simulation failed ($1):" >&2
    tail -5 "$1" >&2
    value="-"
  fi
  echo "$value"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for np in $ranks; do
  simulate "$work/native" "$np" native ring &
  native_job=$!
  for algo in $algos; do simulate "$work/$algo" "$np" shim "$algo"; done
  wait "$native_job"
  native=$(result "$work/native" 4)
  native_wall=$(awk '$1 == "wall" { print $2 }' "$work/native")
  for algo in $algos; do
    fused=$(result "$work/$algo" 5)
    check=$(sed -n 's/^# check: \([a-z]*\).*/\1/p' "$work/$algo" | head -1)
    wall=$(awk '$1 == "wall" { print $2 }' "$work/$algo")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$np" "$algo" "$steps" "$native" "$fused" \
      "${check:--}" "$native_wall" "$wall" "${options:--}" | tee -a "$out"
  done
done
