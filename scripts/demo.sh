#!/usr/bin/env bash
# The main job: sets everything up, then runs an allreduce benchmark (a plain MPI program) on
# 4 ranks with the shim preloaded, timing the real MPI (PMPI_Allreduce) and the shim
# (MPI_Allreduce) side by side in the same run, checking every result, and printing the shim's
# own report of what it did.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" >/dev/null
np=${NP:-4}
echo
echo "== Open MPI, $np ranks on this machine (shared memory): native vs libgfshim, float sum"
GFSHIM_STATS=1 "$root/bench/side_by_side.sh" --mpi openmpi --np "$np" -- -c -b 4K -e 64M -f 4 -r 5
