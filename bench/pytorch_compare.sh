#!/usr/bin/env bash
# The PyTorch example (examples/pytorch_train.py: a small ResNet, per-parameter mpi4py
# MPI_Iallreduce hooks, no torch.distributed; it knows nothing of the shim) run natively and under
# the shim, exact and with fp16 on the wire, repeated: each repeat is one bench/train_compare.sh
# --program pytorch (same seed and epochs, the modes one after the other), so the modes interleave
# (native, exact, fp16, native, exact, fp16, ...) and a change in the machine's load falls on all
# of them; then one table: median samples/s over the repeats (and the range), speedup of the
# medians over native, test accuracy (mean over the repeats), weights identical on every rank in
# every repeat.
#
#   bench/pytorch_compare.sh [--np P | --cluster NxR [--rate 1gbit]] [--modes "native exact fp16"]
#                            [--repeats N] [--keep DIR] -- [TRAINING ARGS]
#
# --np P (default 2): P ranks on this machine's shared memory (no network). --cluster 4x2: on the
# emulated cluster (bench/emulated_cluster.sh: 4 network-namespace "nodes" x 2 ranks, links of
# --rate; needs root; it replaces any emulated cluster already up and removes it at the end).
# Modes: those of train_compare.sh (native, exact, fp16, bf16, ...). --repeats: default 3. The
# shim is build/libgfshim.so. Each rank runs with OMP_NUM_THREADS=1. Training arguments default to
# "--epochs 1 --train-samples 20000 --test-samples 5000"; the first repeat's GFSHIM STATS report
# of each mode is printed after the table. Logs: --keep DIR or a temporary directory (named in the
# output), one folder per repeat.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=2 cluster="" rate=1gbit modes="native exact fp16" repeats=3 keep=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "pytorch_compare.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "pytorch_compare.sh: --repeats N, N >= 1" >&2; exit 2; }
/usr/bin/python3 -c "import torch, mpi4py" 2>/dev/null ||
  { echo "pytorch_compare.sh: /usr/bin/python3 cannot import torch and mpi4py" \
         "(apt-get install python3-torch python3-mpi4py)" >&2; exit 2; }
training=("$@")
[[ ${#training[@]} -gt 0 ]] || training=(--epochs 1 --train-samples 20000 --test-samples 5000)
where=(--np "$np")
[[ -z $cluster ]] || where=(--cluster "$cluster" --rate "$rate")
work=${keep:-$(mktemp -d)}

echo "pytorch_compare: pytorch_train.py ${training[*]}, ${where[*]}, $repeats repeats"
echo "  $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); logs in $work"
for ((r = 1; r <= repeats; r++)); do
  echo "  repeat $r: $modes ..."
  mkdir -p "$work/$r"
  if ! "$root/bench/train_compare.sh" "${where[@]}" --program pytorch --modes "$modes" \
         --keep "$work/$r" -- "${training[@]}" >"$work/$r/train_compare.txt" 2>&1; then
    cat "$work/$r/train_compare.txt"
    exit 1
  fi
done

field() { sed -n "s|^final .*$1 \\([^ ]*\\).*|\\1|p" "$2" | tail -1; }
# mode -> "median min max mean_test_acc identical" over its repeats
summary() {
  local mode=$1 r log rates="" accs="" identical=yes
  for ((r = 1; r <= repeats; r++)); do
    log=$work/$r/$mode.log
    rates+="$(field samples/s "$log") "
    accs+="$(field test_acc "$log") "
    [[ $(field weights_identical "$log") == yes ]] || identical=no
  done
  echo "$rates" | tr ' ' '\n' | grep . | sort -n |
    awk -v accs="$accs" -v identical="$identical" '
      { v[NR] = $1 }
      END {
        median = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        n = split(accs, a, " "); sum = 0; for (i = 1; i <= n; i++) sum += a[i]
        printf "%.0f %.0f %.0f %.4f %s\n", median, v[1], v[NR], sum / n, identical
      }'
}
native_rate=""
[[ " $modes " == *" native "* ]] && native_rate=$(summary native | cut -d' ' -f1)
echo
printf '%-8s %10s %14s %9s %9s %10s\n' mode samples/s range speedup test_acc identical
for mode in $modes; do
  read -r median low high acc identical < <(summary "$mode")
  speedup=-
  [[ -n $native_rate ]] &&
    speedup=$(awk -v a="$median" -v b="$native_rate" 'BEGIN { printf "%.2fx", a / b }')
  printf '%-8s %10s %14s %9s %9s %10s\n' "$mode" "$median" "$low-$high" "$speedup" "$acc" \
    "$identical"
done
for mode in $modes; do
  [[ $mode == native ]] && continue
  echo
  echo "-- GFSHIM STATS of the first $mode run"
  grep -E 'GFSHIM (STATS|WARN)' "$work/1/$mode.log" | grep -vE 'STATS (over|path) ' ||
    echo "   (none: was the shim loaded?)"
done
