#!/usr/bin/env bash
# An emulated cluster on this one machine: N "nodes" as network namespaces, each with one veth
# "NIC" rate-limited by tc tbf in both directions, joined by a bridge in a switch namespace.
# MPI ranks are launched into the nodes through an ssh replacement (ip netns exec + a private
# UTS namespace, so each node has its own hostname and the MPI sees separate hosts). Inside a
# node ranks use shared memory; between nodes, TCP over the rate-limited links.
#
#   bench/emulated_cluster.sh up   [--nodes N] [--rate 1gbit]   create the nodes
#   bench/emulated_cluster.sh run  --ppn R [--np P] -- PROGRAM [ARGS]   Open MPI job on the nodes
#   bench/emulated_cluster.sh down                                 remove everything it created
#   bench/emulated_cluster.sh check                                exit 0 if namespaces work here
#
# `run` forwards LD_PRELOAD and every GFSHIM_* and OMPI_MCA_* variable of the environment to the
# ranks (an MCA choice such as coll_tuned_allreduce_algorithm is then made in every rank) (export
# LD_PRELOAD only for `run`: the script passes it with -x, so mpirun itself stays clean).
# Addresses: 10.231.0.1..N/24, only inside the namespaces it creates (gfsw, gfn0..gfnN-1).
# Facts (MACHINE-NOTES): no netem here, so no delay emulation; a tbf bucket under ~128 KiB
# under-delivers; goodput tops out at ~0.956 of the tbf rate at MTU 1500.
set -euo pipefail

state_dir=/tmp/gfshim-emulated-cluster
switch=gfsw
subnet=10.231.0
node_ns() { echo "gfn$1"; }

die() { echo "emulated_cluster.sh: $*" >&2; exit 2; }
need_root() { [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"; }

cmd_check() {
  need_root
  local probe=gfshim-probe-$$
  if ip netns add "$probe" 2>/dev/null; then
    ip netns del "$probe"
    echo "network namespaces: available"
  else
    echo "network namespaces: not available here"
    return 1
  fi
}

cmd_down() {
  need_root
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^(gfsw|gfn[0-9]+)$' || true); do
    ip netns del "$ns"
  done
  rm -rf "$state_dir"
}

cmd_up() {
  need_root
  local nodes=4 rate=1gbit
  while [[ $# -gt 0 ]]; do
    case $1 in
      --nodes) nodes=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      *) die "up: unknown argument $1" ;;
    esac
  done
  cmd_down
  mkdir -p "$state_dir"
  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for ((i = 0; i < nodes; i++)); do
    local ns; ns=$(node_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "gfv$i" type veth peer name "gfp$i"
    ip link set "gfv$i" netns "$ns"
    ip link set "gfp$i" netns "$switch"
    ip -n "$ns" link set "gfv$i" name eth0
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$switch" link set "gfp$i" master br0
    ip -n "$switch" link set "gfp$i" up
    # Both directions: node -> switch on the node's eth0, switch -> node on the switch port.
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
    ip netns exec "$switch" tc qdisc add dev "gfp$i" root tbf rate "$rate" burst 256kb latency 100ms
    echo "node$i slots=64" >> "$state_dir/hostfile"
  done
  echo "$nodes" > "$state_dir/nodes"
  echo "$rate" > "$state_dir/rate"
  # The ssh replacement: `agent node3 CMD...` runs CMD inside node 3 with hostname node3. Like
  # ssh, it joins the words of the command into one line for a shell (mpirun sends
  # "PATH=...; export PATH; orted ...").
  cat > "$state_dir/agent" <<'AGENT'
#!/usr/bin/env bash
host=$1; shift
exec ip netns exec "gfn${host#node}" unshare --uts /bin/sh -c "hostname $host; $*"
AGENT
  chmod +x "$state_dir/agent"
  echo "emulated cluster: $nodes nodes at $rate per link, hostfile $state_dir/hostfile"
}

cmd_run() {
  need_root
  [[ -f $state_dir/hostfile ]] || die "no emulated cluster: run '$0 up' first"
  local ppn=1 np=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --ppn) ppn=$2; shift 2 ;;
      --np) np=$2; shift 2 ;;
      --) shift; break ;;
      *) die "run: unknown argument $1" ;;
    esac
  done
  local nodes; nodes=$(cat "$state_dir/nodes")
  [[ -n $np ]] || np=$((nodes * ppn))
  local forward=()
  [[ -n ${LD_PRELOAD:-} ]] && forward+=(-x "LD_PRELOAD=$LD_PRELOAD")
  for name in $(env | sed -n 's/^\(GFSHIM_[A-Z_]*\)=.*/\1/p'); do forward+=(-x "$name"); done
  for name in $(env | sed -n 's/^\(OMPI_MCA_[a-z_]*\)=.*/\1/p'); do forward+=(-x "$name"); done
  # mpirun runs inside node 0 (as host node0) so the other nodes can reach it over the bridge.
  env -u LD_PRELOAD OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    ip netns exec "$(node_ns 0)" unshare --uts /bin/sh -c 'hostname node0; exec "$@"' sh \
    mpirun.openmpi -np "$np" --hostfile "$state_dir/hostfile" --map-by "ppr:$ppn:node" \
      --bind-to none --mca plm_rsh_agent "$state_dir/agent" \
      --mca btl tcp,vader,self --mca btl_tcp_if_include "$subnet.0/24" \
      --mca oob_tcp_if_include "$subnet.0/24" --mca mpi_yield_when_idle 1 \
      --mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma \
      "${forward[@]}" "$@"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down ;;
  run) shift; cmd_run "$@" ;;
  check) shift; cmd_check ;;
  *) die "usage: $0 up|run|down|check (see the header)" ;;
esac
