#!/usr/bin/env bash
# Builds libgfshim twice, once per MPI flavour (their handles are incompatible):
#   build/libgfshim.so        for Open MPI programs
#   build-mpich/libgfshim.so  for MPICH programs
# Each build also gets the other's library for the cross-flavour test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
cmake -S . -B build -DGFSHIM_MPI=openmpi -DGFSHIM_BUILD_TESTS=ON -DGFSHIM_OTHER_FLAVOUR_SHIM="$root/build-mpich/libgfshim.so" >/dev/null
cmake -S . -B build-mpich -DGFSHIM_MPI=mpich -DGFSHIM_BUILD_TESTS=ON -DGFSHIM_OTHER_FLAVOUR_SHIM="$root/build/libgfshim.so" >/dev/null
cmake --build build -j "$jobs"
cmake --build build-mpich -j "$jobs"
echo "build: $root/build/libgfshim.so (Open MPI), $root/build-mpich/libgfshim.so (MPICH)"
