#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine and runs every test: unit and
# threads-as-ranks tests, then the real shim under mpirun for Open MPI and for MPICH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
status=0
for dir in build build-mpich; do
  echo "== ctest in $dir"
  (cd "$root/$dir" && ctest --output-on-failure --timeout 900) || status=1
done
exit $status
