#!/usr/bin/env bash
# The main job: sets everything up, then trains a data-parallel classifier on Fashion-MNIST
# (examples/fashion_mnist_train: an MLP, one MPI_Iallreduce per gradient tensor posted during the
# backward pass, MPI_Waitall before the update; it knows nothing about the shim) on 8 ranks of an
# emulated cluster (4 network-namespace "nodes" x 2 ranks, 1 Gbit/s links), without the shim,
# with the shim exact, and with its lossy modes fp16 and CSC 10 %, same seeds and epochs; then
# prints one table (samples/s, speedup, test accuracy, bytes between nodes, identical weights on
# every rank) and each shim run's GFSHIM STATS report.
# Where network namespaces cannot be made (not root, a container), it runs 4 ranks on this
# machine's shared memory instead and says so. It installs and builds only what it runs (the
# Open MPI library and the example; scripts/test.sh builds the rest), the compiler's output going
# to build/demo-build.log.
# DEMO_ARGS replaces the training arguments; DEMO_MODES the modes (see bench/train_compare.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh" demo
log=$root/build/demo-build.log
mkdir -p "$root/build"
echo "demo: building libgfshim (Open MPI) and the training example; compiler output in $log"
configure=()
[[ -f $root/build/CMakeCache.txt ]] || configure=(-DGFSHIM_MPI=openmpi -DGFSHIM_BUILD_TESTS=OFF)
if ! { cmake -S "$root" -B "$root/build" "${configure[@]}" &&
       cmake --build "$root/build" -j "$(nproc)" --target gfshim fashion_mnist_train; } >"$log" 2>&1; then
  tail -40 "$log"
  echo "demo: the build failed (full output: $log)" >&2
  exit 1
fi
read -r -a training <<<"${DEMO_ARGS:---epochs 3 --train-samples 20000 --batch-schedule 128}"
modes=${DEMO_MODES:-native exact fp16 csc0.1}
where=(--np 4)
if [[ $(id -u) -eq 0 ]] && "$root/bench/emulated_cluster.sh" check >/dev/null 2>&1; then
  where=(--cluster 4x2 --rate 1gbit)
else
  echo "demo: network namespaces are not available here (needs root): 4 ranks on shared memory instead"
fi
# CSC on this small model (536 K parameters): 256-element chunks, dense for the first ~epoch.
exec "$root/bench/train_compare.sh" "${where[@]}" --modes "$modes" --csc-warmup 160 \
  --csc-chunk 256 -- "${training[@]}"
