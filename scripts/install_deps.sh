#!/usr/bin/env bash
# Installs the Debian 12 packages libgfshim needs. usage: install_deps.sh [demo|all]
#   demo  what the main job (scripts/demo.sh) builds and runs: compiler, CMake, Open MPI, hwloc,
#         UCX, zlib, the Fashion-MNIST dataset, iproute2 for the emulated cluster
#   all   (default) also MPICH, GoogleTest, SimGrid, Python with mpi4py/numpy/PyTorch, clang for
#         the sanitizers and fuzzing: everything the tests, benchmarks and examples use
# CUDA/NCCL (optional) are not Debian packages; the build uses /usr/local/cuda when present.
set -euo pipefail
profile=${1:-all}
packages=(
  build-essential cmake pkg-config
  openmpi-bin libopenmpi-dev
  libhwloc-dev libucx-dev
  zlib1g-dev dataset-fashion-mnist
  iproute2 util-linux
)
case $profile in
  demo) ;;
  all) packages+=(
         mpich libmpich-dev
         libgtest-dev googletest
         libsimgrid-dev
         python3 python3-mpi4py python3-numpy python3-torch python3-torchvision
         clang libclang-rt-14-dev llvm) ;;
  *) echo "install_deps.sh: profile must be demo or all, not '$profile'" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all packages present"
  exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo=sudo
echo "install_deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
