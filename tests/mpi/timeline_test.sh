#!/usr/bin/env bash
# GFSHIM_TIMELINE end to end: a fused Iallreduce run writes one trace per rank, and every file is
# valid JSON with balanced events (check_timeline.py).
# usage: timeline_test.sh NP RUN_WITH_SHIM [ITS OPTIONS...] -- PROGRAM [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
np=$1 run=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --np "$np" --env "GFSHIM_TIMELINE=$dir/trace" "$@"
python3 "$here/check_timeline.py" "$dir/trace" "$np"
