#!/usr/bin/env bash
# The main job's comparison: one data-parallel training program (it knows nothing of the shim)
# run without the shim and with it in several modes, same seeds and epochs, then one table:
# samples/s, speedup over native, final test accuracy, bytes on the wire, weights identical.
#
#   bench/train_compare.sh [--cluster NxR [--rate 1gbit] | --np P] [--modes "native exact fp16 csc0.1"]
#                          [--program cpp|python|pytorch] [--csc-warmup CALLS] [--csc-chunk ELEMENTS]
#                          [--csc-momentum M] [--csc-clip C] [--csc-decay D] [--keep DIR]
#                          -- [TRAINING ARGS]
#
# --cluster 4x2 runs on the emulated cluster (bench/emulated_cluster.sh: 4 namespaces "nodes" x 2
# ranks, rate-limited links; needs root and network namespaces); "bytes between nodes" is then
# counted on the switch's ports, for native and shim runs alike. --np P runs P ranks on this
# machine's shared memory instead (no network: the shim's gains there are not a cluster's).
# Without the cluster there is no wire to count ("-"; the shim's stats still say what it sent).
# Programs: cpp (examples/fashion_mnist_train), python (examples/fashion_mnist_train.py), pytorch
# (examples/pytorch_train.py). A run that ends with weights_identical no (exit status 1) is still
# tabulated; a run that does not reach its final line stops the comparison.
# Modes: native (no shim), exact (the shim, exact), fp16, bf16, cscD (CSC density D, with 2
# warm-up calls per buffer, or --csc-warmup; chunks of --csc-chunk elements, default 4K), and
# cscD with suffixes: +fp16 or +bf16 (16 bits on the wire too), +mc (DGC momentum correction:
# GFSHIM_CSC_MOMENTUM=M, --csc-momentum, default 0.9, the examples' SGD momentum; the shim hands
# back gradients and the program's momentum optimizer stays as it is), +mcu (the same correction
# handing back the update, GFSHIM_CSC_MOMENTUM_OUTPUT=update, and the program run with
# --momentum 0: plain SGD), +clip (DGC's local gradient clipping: GFSHIM_CSC_CLIP=C, --csc-clip,
# default 1), +decay (with +mc or +mcu: the held accumulation drops D a call,
# GFSHIM_CSC_MOMENTUM_DECAY=D, --csc-decay, default 0.9), +all (every call and fused bucket sparse, GFSHIM_COMPRESS_MIN_BYTES=0), +frozen (the
# control: clipping at 1e-6, so every call of the buffers CSC takes, warm-up included, sends almost
# nothing and the layers they hold keep their initial weights: the accuracy when they do not learn).
# Each shim run's GFSHIM STATS report is printed after the table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cluster="" rate=1gbit np=4 modes="native exact fp16 csc0.1" program=cpp keep="" csc_warmup=2 csc_chunk=4K
csc_momentum=0.9 csc_clip=1 csc_decay=0.9
while [[ $# -gt 0 ]]; do
  case $1 in
    --cluster) cluster=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --program) program=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --csc-warmup) csc_warmup=$2; shift 2 ;;
    --csc-chunk) csc_chunk=$2; shift 2 ;;
    --csc-momentum) csc_momentum=$2; shift 2 ;;
    --csc-clip) csc_clip=$2; shift 2 ;;
    --csc-decay) csc_decay=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "train_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
case $program in
  cpp) cmd=("$root/build/examples/fashion_mnist_train") ;;
  python) cmd=(/usr/bin/python3 "$root/examples/fashion_mnist_train.py") ;;
  pytorch) cmd=(/usr/bin/python3 "$root/examples/pytorch_train.py") ;;
  *) echo "train_compare.sh: --program cpp, python or pytorch" >&2; exit 2 ;;
esac
cmd+=("$@")

emulated=$root/bench/emulated_cluster.sh
if [[ -n $cluster ]]; then
  nodes=${cluster%x*} ppn=${cluster#*x}
  np=$((nodes * ppn))
  trap '"$emulated" down >/dev/null 2>&1 || true' EXIT
  "$emulated" up --nodes "$nodes" --rate "$rate" >/dev/null
  where="emulated cluster: $nodes nodes x $ppn ranks, $rate links"
  inter_gbps=$(awk -v r="$rate" 'BEGIN{n=r+0; if (r ~ /gbit/) print n; else if (r ~ /mbit/) print n/1000; else print 1}')
else
  where="$np ranks on this machine's shared memory (no network)"
fi

# Bytes the nodes sent into the switch so far (every inter-node byte crosses exactly one port).
switch_bytes() {
  local total=0 port
  for ((port = 0; port < nodes; port++)); do
    total=$((total + $(ip netns exec gfsw cat "/sys/class/net/gfp$port/statistics/rx_bytes")))
  done
  echo "$total"
}

run_mode() {  # mode -> $work/mode.log
  local mode=$1 envs=() extra=()
  case $mode in
    native) ;;
    exact) envs=(GFSHIM_STATS=1) ;;
    fp16|bf16) envs=(GFSHIM_STATS=1 "GFSHIM_COMPRESS=$mode") ;;
    csc*)
      local parts suffix
      IFS=+ read -ra parts <<<"${mode#csc}"
      envs=(GFSHIM_STATS=1 "GFSHIM_CSC_DENSITY=${parts[0]}" "GFSHIM_CSC_WARMUP_CALLS=$csc_warmup"
            "GFSHIM_CSC_CHUNK=$csc_chunk")
      for suffix in "${parts[@]:1}"; do
        case $suffix in
          fp16|bf16) envs+=("GFSHIM_COMPRESS=$suffix") ;;
          mc) envs+=("GFSHIM_CSC_MOMENTUM=$csc_momentum" GFSHIM_CSC_MOMENTUM_OUTPUT=gradient) ;;
          mcu) envs+=("GFSHIM_CSC_MOMENTUM=$csc_momentum" GFSHIM_CSC_MOMENTUM_OUTPUT=update)
               extra=(--momentum 0) ;;
          clip) envs+=("GFSHIM_CSC_CLIP=$csc_clip") ;;
          decay) envs+=("GFSHIM_CSC_MOMENTUM_DECAY=$csc_decay") ;;
          frozen) envs+=(GFSHIM_CSC_CLIP=1e-6) ;;
          all) envs+=(GFSHIM_COMPRESS_MIN_BYTES=0) ;;
          *) echo "train_compare.sh: unknown mode suffix +$suffix in $mode" >&2; exit 2 ;;
        esac
      done ;;
    *) echo "train_compare.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
  [[ $mode != native ]] && envs+=("LD_PRELOAD=$root/build/libgfshim.so")
  # UCX reports a veth's nominal speed (~10 Gbit/s), not the emulated link's: tell the cost model.
  [[ $mode != native && -n $cluster ]] && envs+=("GFSHIM_INTER_GBPS=$inter_gbps")
  local before=0 after=0
  if [[ -n $cluster ]]; then
    before=$(switch_bytes)
    env "${envs[@]}" OMP_NUM_THREADS=1 "$emulated" run --ppn "$ppn" -- "${cmd[@]}" "${extra[@]}" > "$work/$mode.log" 2>&1
    after=$(switch_bytes)
  else
    local forward=()
    for e in "${envs[@]}" OMP_NUM_THREADS=1; do forward+=(-x "$e"); done
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      mpirun.openmpi -np "$np" --bind-to none "${forward[@]}" "${cmd[@]}" "${extra[@]}" > "$work/$mode.log" 2>&1
  fi
  if [[ -n $cluster ]]; then echo $((after - before)) > "$work/$mode.wire"; fi
}

echo "train_compare: $(basename "${cmd[0]}")${cmd[1]:+ ${cmd[*]:1}} on $where"
echo "  $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); logs in $work"
for mode in $modes; do
  echo "  running $mode ..."
  if ! run_mode "$mode" && ! grep -q '^final ' "$work/$mode.log"; then
    echo "train_compare: the $mode run failed; its log:"
    cat "$work/$mode.log"
    exit 1
  fi
done

field() { sed -n "s|^final .*$1 \\([^ ]*\\).*|\\1|p" "$2" | tail -1; }
native_rate=""
echo
printf '%-12s %12s %9s %10s %18s %10s\n' mode samples/s speedup test_acc 'between nodes' identical
for mode in $modes; do
  log=$work/$mode.log
  rate_of=$(field samples/s "$log")
  [[ $mode == native ]] && native_rate=$rate_of
  speedup=-
  [[ -n $native_rate && -n $rate_of ]] && speedup=$(awk -v a="$rate_of" -v b="$native_rate" 'BEGIN{printf "%.2fx", a/b}')
  wire=-
  [[ -n $cluster ]] && wire=$(awk -v b="$(cat "$work/$mode.wire")" 'BEGIN{printf "%.1f MB", b/1e6}')
  printf '%-12s %12s %9s %10s %18s %10s\n' "$mode" "${rate_of:--}" "$speedup" "$(field test_acc "$log")" "$wire" "$(field weights_identical "$log")"
done
for mode in $modes; do
  [[ $mode == native ]] && continue
  echo
  echo "-- GFSHIM STATS of the $mode run"
  grep -E 'GFSHIM (STATS|WARN)' "$work/$mode.log" | grep -vE 'STATS (over|path) ' || echo "   (none: was the shim loaded?)"
done
