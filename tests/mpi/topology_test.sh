#!/usr/bin/env bash
# Topology detection end to end: the shim dumps what it detected (GFSHIM_TOPO_DUMP), gfshim-info
# reads the dump back (GFSHIM_TOPO_FILE), gfshim-info under mpirun prints the agreed multi-rank
# view, and a UCX that cannot be loaded is reported, not fatal.
# usage: topology_test.sh openmpi|mpich MPIRUN LIBGFSHIM GFSHIM_INFO ALLREDUCE_BENCH
set -euo pipefail
flavour=$1 launcher=$2 shim=$3 info=$4 bench=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "topology_test.sh: FAILED: $*"; exit 1; }
expect() {  # expect NAME OUTPUT REGEX
  grep -Eq -- "$3" <<<"$2" || { echo "$2"; fail "$1: output lacks /$3/"; }
}
launch=("$launcher" -np)
if [[ $flavour == openmpi ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fi
with_env() {  # with_env NAME=VALUE... -- PROGRAM...: the launcher's way to pass variables
  local args=()
  while [[ $1 != -- ]]; do
    if [[ $flavour == openmpi ]]; then args+=(-x "$1"); else args+=(-genv "${1%%=*}" "${1#*=}"); fi
    shift
  done
  shift
  echo "${args[@]}" "$@"
}

# 1. The shim writes what it detected on its first communicator.
out=$(timeout 300 "${launch[@]}" 2 $(with_env "LD_PRELOAD=$shim" GFSHIM_ALGO=ring \
  "GFSHIM_TOPO_DUMP=$work/dump.topo" -- "$bench" -c -b 1M -e 1M -r 1 -w 0 -n 1) 2>&1) ||
  { echo "$out"; fail "the dumping job failed"; }
expect dump "$out" "check: passed"
[[ -s $work/dump.topo ]] || fail "GFSHIM_TOPO_DUMP wrote nothing"
dump=$(cat "$work/dump.topo")
echo "$dump"
expect dump "$dump" "^nodes = 1$"
expect dump "$dump" "^ranks_per_node = 2$"
expect dump "$dump" "^inter_link = gbps=[0-9.e+]+ latency_us=[0-9.e+]+$"

# 2. gfshim-info reads it back as a 2-rank layout and shows what auto would choose.
out=$(GFSHIM_TOPO_FILE=$work/dump.topo "$info")
expect info-file "$out" "^topology    : 1 node x 2 ranks"
expect info-file "$out" "^hardware    : GFSHIM_TOPO_FILE="
expect info-file "$out" "allreduce of float SUM on 2 ranks \(GFSHIM_ALGO=auto\)"
expect info-file "$out" "^ +67108864  ring \(auto: lowest predicted time\) +ring .*native "

# 3. Under mpirun: the collective detection, printed once by rank 0.
out=$(timeout 300 "${launch[@]}" 3 "$info" 2>&1) || { echo "$out"; fail "gfshim-info under mpirun failed"; }
expect info-mpirun "$out" "^ranks       : 3; node of each rank: 0 0 0$"
expect info-mpirun "$out" "^hardware    : identical across nodes$"
expect info-mpirun "$out" "^topology    : 1 node x 3 ranks"
[[ $(grep -c "^libgfshim " <<<"$out") -eq 1 ]] || fail "info-mpirun: more than one rank printed"

# 4. A UCX that cannot be loaded is reported and replaced by the defaults (Open MPI's libmpi does
# not link UCX; MPICH's does, so there the stand-in library would stop the program loading).
if [[ $flavour == openmpi ]]; then
  mkdir "$work/lib"
  : >"$work/lib/libucs.so.0"
  out=$(LD_LIBRARY_PATH=$work/lib "$info")
  expect no-ucx "$out" "^transports  : not used: cannot load libucs.so.0"
  expect no-ucx "$out" "inter-node gbps=10 latency_us=20 \(default\)"
fi
echo "topology test: ok"
