#!/usr/bin/env bash
# GFSHIM_TIMELINE end to end: a fused Iallreduce run writes one trace per rank, and every file is
# valid JSON with balanced events and the lazy allreduce's phases (check_timeline.py), plus the
# comma-separated algorithm phases PHASES (may be empty) on every rank.
# usage: timeline_test.sh NP PHASES RUN_WITH_SHIM [ITS OPTIONS...] -- PROGRAM [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
np=$1 phases=$2 run=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --np "$np" --env "GFSHIM_TIMELINE=$dir/trace" "$@"
IFS=, read -r -a required <<<"$phases"
python3 "$here/check_timeline.py" "$dir/trace" "$np" "${required[@]}"
