#!/usr/bin/env bash
# GFSHIM_TIMELINE end to end: a fused Iallreduce run writes one trace per rank, and every file is
# valid JSON with balanced events and the lazy allreduce's phases (check_timeline.py), plus the
# comma-separated algorithm phases PHASES (may be empty) on every rank; with --before-us T, every
# timestamp below T microseconds (the simulated clock under SMPI).
# usage: timeline_test.sh [--before-us T] NP PHASES RUN [ITS OPTIONS...] -- PROGRAM [ARGS...]
#   RUN: tests/mpi/run_with_shim.sh or tests/smpi/run_simulated.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=()
if [[ $1 == --before-us ]]; then
  before=(--before-us "$2")
  shift 2
fi
np=$1 phases=$2 run=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --np "$np" --env "GFSHIM_TIMELINE=$dir/trace" "$@"
IFS=, read -r -a required <<<"$phases"
python3 "$here/check_timeline.py" "${before[@]+"${before[@]}"}" "$dir/trace" "$np" \
  "${required[@]}"
