#!/usr/bin/env bash
# Accuracy of the lossy modes over seeds (issue 20): bench/train_compare.sh once per seed and per
# batch schedule, then one table per schedule of every mode's final test accuracy (mean over the
# seeds, and the lowest and highest), its difference to the exact run's mean, samples/s and the
# bytes the nodes sent between them (means over the seeds).
#
#   bench/lossy_accuracy.sh [--seeds "1 2 3"] [--schedules "none 128:2,256"]
#                           [--modes "exact fp16 csc0.1 ..."] [--cluster 4x2 | --np P] [--out DIR]
#                           [--csc-warmup CALLS] [--csc-clip C] [--csc-decay D]
#                           [--csc-chunk ELEMENTS]
#                           [-- TRAINING ARGS]
#
# Defaults: seeds 1 2 3; schedules none (the fixed batch of the training arguments) and
# 128:2,256 (Mikami et al.'s batch-size control: the batch and the learning rate double in the
# third epoch); modes exact fp16 csc0.01+frozen csc0.1 csc0.01 csc0.1+mc csc0.01+mc
# csc0.1+mc+clip csc0.01+mc+clip (see train_compare.sh: +mc momentum correction with the
# program's optimizer unchanged, +mcu the corrected update into plain SGD, +clip local clipping at
# --csc-clip C, default 0.1, +decay the held accumulation dropping --csc-decay D a call, default
# 0.9); csc0.01+frozen is the floor: the layers CSC carries never learn.
# Where it ends near exact, their learning does not show in the accuracy and no mode is tested
# (bench/RESULTS.md, "The floor" and "Controls"). No dense warm-up by default (--csc-warmup 0): with
# one, those layers learn densely first and the floor is the accuracy after the warm-up, which
# +frozen (clipped in the warm-up too) does not give. The main job's cluster and arguments (4
# nodes x 2 ranks at 1 Gbit/s; 3 epochs of 20 000 images, batch 128; CSC chunks of 256
# elements, or --csc-chunk); --np P runs P ranks on this machine's shared memory instead (about
# ten times faster with 8 ranks on 2 cores; no bytes between nodes). Each run's logs stay in
# DIR/<schedule>/seed<N>/ (default: a new temporary directory), so the table can be made again
# with --table DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seeds="1 2 3" schedules="none 128:2,256" cluster=4x2 np="" out="" table_only="" csc_warmup=0 csc_clip=0.1 csc_chunk=256
csc_decay=0.9
modes="exact fp16 csc0.01+frozen csc0.1 csc0.01 csc0.1+mc csc0.01+mc csc0.1+mc+clip csc0.01+mc+clip"
while [[ $# -gt 0 ]]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --csc-warmup) csc_warmup=$2; shift 2 ;;
    --csc-clip) csc_clip=$2; shift 2 ;;
    --csc-decay) csc_decay=$2; shift 2 ;;
    --csc-chunk) csc_chunk=$2; shift 2 ;;
    --table) table_only=$2; shift 2 ;;
    --) shift; break ;;
    *) sed -n '2,24p' "$0"; exit 2 ;;
  esac
done
training=("$@")
[[ ${#training[@]} -gt 0 ]] || training=(--epochs 3 --train-samples 20000)
dir_of() { echo "${1//[:,]/_}"; }  # a schedule as a directory name

if [[ -z $table_only ]]; then
  out=${out:-$(mktemp -d)}
  if [[ -n $np ]]; then where=(--np "$np"); else where=(--cluster "$cluster"); fi
  echo "lossy_accuracy: seeds $seeds, schedules $schedules, ${where[*]#--}; logs in $out"
  for schedule in $schedules; do
    for seed in $seeds; do
      args=("${training[@]}" --seed "$seed")
      [[ $schedule != none ]] && args+=(--batch-schedule "$schedule")
      "$root/bench/train_compare.sh" "${where[@]}" --modes "$modes" --csc-chunk "$csc_chunk" \
        --csc-warmup "$csc_warmup" --csc-clip "$csc_clip" --csc-decay "$csc_decay" --keep "$out/$(dir_of "$schedule")/seed$seed" -- "${args[@]}" |
        sed -n '/^mode /,/^$/p'
    done
  done
else
  out=$table_only
fi

# One table per schedule, from the kept logs.
for schedule in $schedules; do
  echo
  echo "schedule: $schedule (seeds: $seeds)"
  echo "| mode | test accuracy, mean | lowest - highest | vs exact (points) | samples/s | between nodes |"
  echo "|---|---|---|---|---|---|"
  for mode in $modes; do
    for seed in $seeds; do
      log=$out/$(dir_of "$schedule")/seed$seed/$mode.log
      wire=$out/$(dir_of "$schedule")/seed$seed/$mode.wire
      [[ -f $log ]] || continue
      sed -n "s|^final test_acc \([^ ]*\) .* samples/s \([^ ]*\) .*|$mode \1 \2 $(cat "$wire" 2>/dev/null || echo -)|p" "$log" | tail -1
    done
  done | awk -v modes="$modes" '
    { n[$1]++; acc[$1] += $2; rate[$1] += $3
      if ($4 == "-") nowire[$1] = 1; else wire[$1] += $4
      if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2
      if (!($1 in hi) || $2 > hi[$1]) hi[$1] = $2 }
    END {
      split(modes, order, " ")
      exact = ("exact" in n) ? acc["exact"] / n["exact"] : -1
      for (i = 1; i in order; i++) {
        m = order[i]
        if (!(m in n)) { printf "| %s | (no run) | | | | |\n", m; continue }
        mean = acc[m] / n[m]
        delta = exact < 0 ? "-" : sprintf("%+.2f", 100 * (mean - exact))
        between = (m in nowire) ? "-" : sprintf("%.0f MB", wire[m] / n[m] / 1e6)
        printf "| %s | %.4f | %.4f - %.4f | %s | %.0f | %s |\n", m, mean, lo[m], hi[m], delta,
               rate[m] / n[m], between
      }
    }'
done
