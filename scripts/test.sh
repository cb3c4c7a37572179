#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine and runs every test: unit and
# threads-as-ranks tests, then the real shim under mpirun for Open MPI and for MPICH, and linked
# into programs on simulated ranks (SimGrid SMPI, build-smpi); then the
# unit and threads-as-ranks tests and the fusion progress thread under the sanitizers
# (scripts/sanitize.sh), and 30 s of fuzzing per parser (scripts/fuzz.sh; longer runs:
# scripts/fuzz.sh SECONDS).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
cmake -S "$root" -B "$root/build-smpi" -DGFSHIM_MPI=smpi >/dev/null
cmake --build "$root/build-smpi" -j "$(nproc)"
status=0
for dir in build build-mpich build-smpi; do
  echo "== ctest in $dir"
  (cd "$root/$dir" && ctest --output-on-failure --timeout 900) || status=1
done
echo "== sanitizers"
"$root/scripts/sanitize.sh" || status=1
echo "== fuzzing"
"$root/scripts/fuzz.sh" 30 || status=1
exit $status
