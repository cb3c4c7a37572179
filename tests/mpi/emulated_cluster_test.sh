#!/usr/bin/env bash
# The shim across emulated nodes: 2 network-namespace nodes x 2 ranks (bench/emulated_cluster.sh),
# the torus with rows = nodes as detected by MPI_COMM_TYPE_SHARED, forced and chosen by auto,
# checked results, the host's CPUs counted across the nodes that share them, then the namespaces
# are removed. Exits 77 (skipped, with the reason) where namespaces cannot be created.
# usage: emulated_cluster_test.sh LIBGFSHIM ALLREDUCE_BENCH
set -euo pipefail
shim=$1 bench=$2
cluster=$(cd "$(dirname "$0")/../../bench" && pwd)/emulated_cluster.sh
if [[ $(id -u) -ne 0 ]] || ! "$cluster" check >/dev/null 2>&1; then
  echo "SKIPPED: network namespaces are not available here (needs root and ip netns)"
  exit 77
fi
trap '"$cluster" down' EXIT
"$cluster" up --nodes 2 --rate 4gbit
output=$(LD_PRELOAD=$shim GFSHIM_ALGO=torus2d GFSHIM_STATS=1 \
  GFSHIM_DEBUG=INFO GFSHIM_DEBUG_SUBSYS=ENGINE \
  "$cluster" run --ppn 2 -- "$bench" -c -b 1M -e 4M -f 4 -r 1 -w 0 -n 1 2>&1) || {
  echo "$output"; echo "FAILED: the job failed"; exit 1; }
echo "$output"
grep -q "check: passed" <<<"$output" || { echo "FAILED: wrong results"; exit 1; }
grep -Eq "engine +torus2d \(GFSHIM_ALGO=torus2d, rows are nodes\)" <<<"$output" ||
  { echo "FAILED: the torus did not run on the detected 2 x 2 node grid"; exit 1; }
# The 2 nodes share this host's CPUs: with fewer than the 4 ranks, the host is oversubscribed
# though each node has as many CPUs as ranks (src/mpi/detect.cpp, machineOfRank), by 4 / CPUs
# ranks a CPU, which the cost model charges.
cpus=$(nproc)
if ((cpus < 4)); then
  per_cpu=$(awk -v cpus="$cpus" 'BEGIN { printf "%.2g", 4 / cpus }')
  shared="oversubscribed (more ranks than CPUs on a node, or on the host that nodes share:"
  shared+=" $per_cpu ranks a CPU)"
  grep -qF "$shared" <<<"$output" || {
    echo "FAILED: 4 ranks on $cpus CPUs shared by the nodes were not seen as oversubscribed"
    exit 1
  }
elif grep -q "oversubscribed" <<<"$output"; then
  echo "FAILED: 4 ranks on $cpus CPUs were taken as oversubscribed"; exit 1
fi
# GFSHIM_ALGO=auto on the same nodes: the cost model (UCX's figures for the veth "NICs") picks
# the torus for large calls.
output=$(LD_PRELOAD=$shim GFSHIM_STATS=1 \
  "$cluster" run --ppn 2 -- "$bench" -c -b 4M -e 4M -r 1 -w 0 -n 1 2>&1) || {
  echo "$output"; echo "FAILED: the auto job failed"; exit 1; }
echo "$output"
grep -q "check: passed" <<<"$output" || { echo "FAILED: wrong results under auto"; exit 1; }
grep -Eq "engine +torus2d \(auto: lowest predicted time\)" <<<"$output" ||
  { echo "FAILED: auto did not choose the torus across nodes"; exit 1; }
echo "emulated cluster test: ok"
