#!/usr/bin/env bash
# Runs a program with an environment variable whose value depends on the MPI rank, to test
# ranks that disagree: rank_env.sh NAME VALUE_ON_RANK_0 VALUE_ON_OTHER_RANKS PROGRAM [ARGS...]
set -euo pipefail
name=$1 rank0=$2 others=$3
shift 3
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
if [[ $rank == 0 ]]; then export "$name=$rank0"; else export "$name=$others"; fi
exec "$@"
