#!/usr/bin/env bash
# The PyTorch example (examples/pytorch_train.py: a small ResNet, per-parameter mpi4py
# MPI_Iallreduce hooks, no torch.distributed; it knows nothing of the shim) run natively and under
# the shim, exact and with fp16 on the wire: same seed, same epochs, the modes interleaved
# (native, exact, fp16, native, exact, fp16, ...) so that a change in the machine's load falls on
# all of them; then one table: median samples/s over the repeats (and the range), speedup of the
# medians over native, test accuracy (mean over the repeats), weights identical on every rank in
# every repeat.
#
#   bench/pytorch_compare.sh [--np P | --cluster NxR [--rate 1gbit]] [--modes "native exact fp16"]
#                            [--repeats N] [--shim LIB] [--keep DIR] -- [TRAINING ARGS]
#
# --np P (default 2): P ranks on this machine's shared memory (no network). --cluster 4x2: on the
# emulated cluster (bench/emulated_cluster.sh: 4 network-namespace "nodes" x 2 ranks, links of
# --rate; needs root; it replaces any emulated cluster already up and removes it at the end).
# Modes: native (no shim), exact (the shim), fp16, bf16 (GFSHIM_COMPRESS). --repeats: default 3.
# --shim: default build/libgfshim.so. Each rank runs with OMP_NUM_THREADS=1. Training arguments
# default to "--epochs 1 --train-samples 20000 --test-samples 5000"; the first shim run's
# GFSHIM STATS report of each mode is printed after the table. Logs: --keep DIR or a temporary
# directory (named in the output).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=2 cluster="" rate=1gbit modes="native exact fp16" repeats=3 shim=$root/build/libgfshim.so keep=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --shim) shim=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "pytorch_compare.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "pytorch_compare.sh: --repeats N, N >= 1" >&2; exit 2; }
for mode in $modes; do
  case $mode in
    native|exact|fp16|bf16) ;;
    *) echo "pytorch_compare.sh: unknown mode $mode (native exact fp16 bf16)" >&2; exit 2 ;;
  esac
done
if [[ $modes =~ exact|fp16|bf16 ]]; then
  if ! shim=$(realpath -e "$shim" 2>/dev/null) || [[ ! -f $shim ]]; then
    echo "pytorch_compare.sh: no shim library (build it, or --shim LIB)" >&2
    exit 2
  fi
fi
/usr/bin/python3 -c "import torch, mpi4py" 2>/dev/null ||
  { echo "pytorch_compare.sh: /usr/bin/python3 cannot import torch and mpi4py" \
         "(apt-get install python3-torch python3-mpi4py)" >&2; exit 2; }
training=("$@")
[[ ${#training[@]} -gt 0 ]] || training=(--epochs 1 --train-samples 20000 --test-samples 5000)
# The thread count travels with the command: the emulated cluster forwards only GFSHIM_*,
# OMPI_MCA_* and LD_PRELOAD.
cmd=(env OMP_NUM_THREADS=1 /usr/bin/python3 "$root/examples/pytorch_train.py" "${training[@]}")
work=${keep:-$(mktemp -d)}
mkdir -p "$work"

emulated=$root/bench/emulated_cluster.sh
if [[ -n $cluster ]]; then
  nodes=${cluster%x*} ppn=${cluster#*x}
  np=$((nodes * ppn))
  trap '"$emulated" down >/dev/null 2>&1 || true' EXIT
  "$emulated" up --nodes "$nodes" --rate "$rate" >/dev/null
  where="emulated cluster: $nodes nodes x $ppn ranks, $rate links"
  # UCX and the kernel report a veth's nominal speed, not the emulated link's: tell the cost model.
  inter_gbps=$(awk -v r="$rate" 'BEGIN { n = r + 0; if (r ~ /gbit/) print n
                                          else if (r ~ /mbit/) print n / 1000; else print 1 }')
else
  where="$np ranks on this machine's shared memory (no network)"
fi

run_once() {  # mode repeat -> $work/mode.repeat.log
  local mode=$1 log=$work/$1.$2.log envs=()
  case $mode in
    native) ;;
    exact) envs=("LD_PRELOAD=$shim" GFSHIM_STATS=1) ;;
    fp16|bf16) envs=("LD_PRELOAD=$shim" GFSHIM_STATS=1 "GFSHIM_COMPRESS=$mode") ;;
  esac
  if [[ -n $cluster ]]; then
    [[ $mode != native ]] && envs+=("GFSHIM_INTER_GBPS=$inter_gbps")
    env "${envs[@]}" "$emulated" run --ppn "$ppn" -- "${cmd[@]}" >"$log" 2>&1
  else
    local forward=() e
    for e in "${envs[@]+"${envs[@]}"}"; do forward+=(-x "$e"); done
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      mpirun.openmpi -np "$np" --bind-to none "${forward[@]+"${forward[@]}"}" "${cmd[@]}" \
      >"$log" 2>&1
  fi
}

echo "pytorch_compare: pytorch_train.py ${training[*]} on $where, $repeats repeats"
echo "  $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); logs in $work"
for ((r = 1; r <= repeats; r++)); do
  for mode in $modes; do
    echo "  repeat $r: $mode ..."
    # A run that ends with weights_identical no exits 1: the table says so; other failures stop.
    if ! run_once "$mode" "$r" && ! grep -q '^final ' "$work/$mode.$r.log"; then
      echo "pytorch_compare: the $mode run failed; its log:"
      cat "$work/$mode.$r.log"
      exit 1
    fi
  done
done

field() { sed -n "s|^final .*$1 \\([^ ]*\\).*|\\1|p" "$2" | tail -1; }
# mode -> "median min max mean_test_acc identical" over its repeats
summary() {
  local mode=$1 r log rates="" accs="" identical=yes
  for ((r = 1; r <= repeats; r++)); do
    log=$work/$mode.$r.log
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
  grep -E 'GFSHIM (STATS|WARN)' "$work/$mode.1.log" | grep -vE 'STATS (over|path) ' ||
    echo "   (none: was the shim loaded?)"
done
