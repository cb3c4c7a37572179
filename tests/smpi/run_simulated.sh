#!/usr/bin/env bash
# Runs a program built for SimGrid SMPI (cmake -DGFSHIM_MPI=smpi) on simulated ranks and checks
# what it printed, as tests/mpi/run_with_shim.sh does for the real MPIs: the exit status, optional
# regular expressions, and (with --expect-engine) that the shim's statistics report shows engine
# calls, so no test passes by silently passing everything through.
#
# usage: run_simulated.sh --smpirun PATH --platform XML --np N [--ranks-per-host R]
#                         [--env NAME=VALUE]... [--cfg SMPI_OPTION]... [--expect REGEX]...
#                         [--expect-engine] [--time-limit S] -- PROGRAM [ARGS...]
# The hosts are the platform's node-0, node-1, ... with R ranks each (rank r on node r / R).
# Computation is not simulated (smpi/simulate-computation:no): simulated time is the network's.
# Links are ideal at the platform's stated rate and latency (SMPI's correction factors, which
# were calibrated on a TCP cluster, and its cross traffic off), and a failed MPI_Test costs 1 us
# of simulated time without growing (the shim's tasks poll with MPI_Test). With SMPI's defaults
# the shim's 16 MB torus allreduce on 64 ABCI ranks took 31 ms of simulated time, with these 2.
# MPI_Allgather takes Open MPI's selection (smpi/allgather:ompi): SMPI's default is the linear
# algorithm, p-1 messages per rank, and the shim's one topology Allgather alone took 60 of the
# 65 s that a 128-rank simulation lasted with it (5 s without). (smpi/coll-selector:ompi for every
# collective, as bench/sim/scale.sh sets, fails the conformance check: SIGFPE inside SMPI.)
set -euo pipefail

smpirun="" platform="" np=0 per_host=4 expect_engine=0 time_limit=900
envs=() cfgs=() expects=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smpirun) smpirun=$2; shift 2 ;;
    --platform) platform=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --cfg) cfgs+=("--cfg=$2"); shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --expect-engine) expect_engine=1; shift ;;
    --time-limit) time_limit=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_simulated.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n $smpirun && -n $platform && $np -gt 0 && $# -gt 0 ]] || {
  echo "run_simulated.sh: needs --smpirun, --platform, --np and a program" >&2
  exit 2
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One line per rank (smpirun would otherwise write an unrolled copy into the current directory).
for ((r = 0; r < np; r++)); do echo "node-$((r / per_host))"; done >"$work/hosts"

cmd=(env GFSHIM_STATS=1 "${envs[@]+"${envs[@]}"}"
     timeout -k 10 "$time_limit" "$smpirun" -np "$np" -platform "$platform"
     -hostfile "$work/hosts" --cfg=smpi/simulate-computation:no --cfg=smpi/tmpdir:"$work"
     --cfg=smpi/test:1e-6 --cfg=smpi/grow-injected-times:no --cfg=smpi/bw-factor:0:1
     --cfg=smpi/lat-factor:0:1 --cfg=network/crosstraffic:0 --cfg=smpi/allgather:ompi
     --log=root.thres:warning "${cfgs[@]+"${cfgs[@]}"}" "$@")
echo "# ${cmd[*]}"
status=0
"${cmd[@]}" >"$work/log" 2>&1 || status=$?
output=$(<"$work/log")
echo "$output"

fail() { echo "run_simulated.sh: FAILED: $*"; exit 1; }
[[ $status -ne 124 && $status -ne 137 ]] || fail "the simulation did not end within $time_limit s"
[[ $status -eq 0 ]] || fail "exit status $status"
for re in "${expects[@]+"${expects[@]}"}"; do
  grep -Eq -- "$re" <<<"$output" || fail "output lacks /$re/"
done
if [[ $expect_engine == 1 ]]; then
  engine=$(sed -n 's/.*GFSHIM STATS summary engine_calls=\([0-9]*\).*/\1/p' <<<"$output" | tail -1)
  [[ -n $engine ]] || fail "no GFSHIM STATS summary line (was the shim linked in?)"
  [[ $engine -gt 0 ]] || fail "the shim's engine handled no call"
fi
echo "run_simulated.sh: ok"
