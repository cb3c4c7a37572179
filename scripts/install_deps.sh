#!/usr/bin/env bash
# Installs the Debian 12 packages libgfshim needs to build, test and run its examples.
# CUDA/NCCL (optional) are not Debian packages; the build uses /usr/local/cuda when present.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  openmpi-bin libopenmpi-dev mpich libmpich-dev
  libgtest-dev googletest
  libhwloc-dev libucx-dev
  libsimgrid-dev
  python3 python3-mpi4py python3-numpy
  zlib1g-dev dataset-fashion-mnist
  iproute2 util-linux
  clang libclang-rt-14-dev llvm
)
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
