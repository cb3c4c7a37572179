#!/usr/bin/env bash
# Runs an MPI program under mpirun with libgfshim.so preloaded into every rank, then checks its
# output: the exit status, optional regular expressions, and (with --expect-engine) that the
# shim's statistics report shows engine calls, so a test cannot pass by silently passing
# everything through.
#
# usage: run_with_shim.sh --mpi openmpi|mpich --launcher MPIRUN --shim LIB --np N
#                         [--env NAME=VALUE]... [--expect REGEX]... [--expect-once REGEX]...
#                         [--reject REGEX]... [--expect-engine | --expect-no-engine]
#                         [--expect-fail] [--time-limit SECONDS] -- PROGRAM [ARGS...]
# --time-limit: the run must end by itself within SECONDS (without it: 600, and a timeout is just
# a non-zero status); if `timeout` has to end it, the test fails as a hang even with
# --expect-fail, so "the MPI aborted the job" and "we had to kill a hang" stay apart.
# Every run prints its wall time as "# wall: S s, exit status N, ended at EPOCH".
# Open MPI 4.x's launcher sometimes reports a rank that did finalize as "with PID 0 ... exiting
# improperly" (a race between the rank's exit and its finalize message, worst on a loaded machine:
# open-mpi/ompi#7833, #9389, #12607; seen here 3 times in 396 tests beside a simulation). A run
# that fails with that report, and was not expected to fail, is run once more and says so; the
# second run's result stands. A rank that really exits without MPI_Finalize is reported the same
# way and fails both runs.
set -euo pipefail

flavour=openmpi launcher="" shim="" np=2 expect_engine="" expect_fail=0 time_limit=600 hang_fails=0
envs=() expects=() onces=() rejects=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --mpi) flavour=$2; shift 2 ;;
    --launcher) launcher=$2; shift 2 ;;
    --shim) shim=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --expect-once) onces+=("$2"); shift 2 ;;
    --reject) rejects+=("$2"); shift 2 ;;
    --expect-engine) expect_engine=yes; shift ;;
    --expect-no-engine) expect_engine=no; shift ;;
    --expect-fail) expect_fail=1; shift ;;
    --time-limit) time_limit=$2; hang_fails=1; shift 2 ;;
    --) shift; break ;;
    *) echo "run_with_shim.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "run_with_shim.sh: no program given" >&2; exit 2; }

envs+=("GFSHIM_STATS=1")
cmd=()
if [[ $flavour == openmpi ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  cmd=("$launcher" -np "$np" --bind-to none -x "LD_PRELOAD=$shim")
  for e in "${envs[@]}"; do cmd+=(-x "$e"); done
else
  cmd=("$launcher" -np "$np" -genv LD_PRELOAD "$shim")
  for e in "${envs[@]}"; do cmd+=(-genv "${e%%=*}" "${e#*=}"); done
fi
cmd+=("$@")
echo "# cmd: ${cmd[*]}"
# The output goes to a file, not through $(...): ranks orphaned by a killed launcher would hold a
# pipe open, and the test would wait for them long after the time limit.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run_once() {
  started=$(date +%s.%N)
  timeout -k 10 "$time_limit" "${cmd[@]}" >"$log" 2>&1 && status=0 || status=$?
  ended=$(date +%s.%N)
  output=$(<"$log")
  echo "$output"
  wall=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.3f", b - a }')
  echo "# wall: $wall s, exit status $status, ended at $ended"
}
run_once
if [[ $flavour == openmpi && $expect_fail == 0 && $status -ne 0 ]] &&
   grep -q "with PID 0 on" <<<"$output" && grep -q "exiting improperly" <<<"$output"; then
  echo "# Open MPI reported a rank with PID 0 exiting improperly (its launcher's finalize race, or a"
  echo "# rank without MPI_Finalize): running once more; this run's result stands"
  run_once
fi

fail() { echo "run_with_shim.sh: FAILED: $*"; exit 1; }
if [[ $hang_fails == 1 ]] && { [[ $status -eq 124 ]] || { [[ $status -eq 137 ]] && awk -v w="$wall" -v l="$time_limit" 'BEGIN { exit !(w >= l) }'; }; }; then
  fail "the run did not end within $time_limit s: timeout had to kill it (a hang)"
fi
if [[ $expect_fail == 1 ]]; then
  [[ $status -ne 0 ]] || fail "expected a non-zero exit status"
else
  [[ $status -eq 0 ]] || fail "exit status $status"
fi
for re in "${expects[@]+"${expects[@]}"}"; do
  grep -Eq -- "$re" <<<"$output" || fail "output lacks /$re/"
done
for re in "${onces[@]+"${onces[@]}"}"; do
  n=$(grep -Ec -- "$re" <<<"$output" || true)
  [[ $n -eq 1 ]] || fail "/$re/ appears $n times, expected exactly once"
done
for re in "${rejects[@]+"${rejects[@]}"}"; do
  if grep -Eq -- "$re" <<<"$output"; then fail "output contains /$re/"; fi
done
if [[ -n $expect_engine ]]; then
  engine=$(sed -n 's/.*GFSHIM STATS summary engine_calls=\([0-9]*\).*/\1/p' <<<"$output" | tail -1)
  [[ -n $engine ]] || fail "no GFSHIM STATS summary line (was the shim loaded?)"
  if [[ $expect_engine == yes && $np -gt 1 && $engine -eq 0 ]]; then fail "the shim's engine handled no call"; fi
  if [[ $expect_engine == no && $engine -ne 0 ]]; then fail "the shim's engine handled $engine calls, expected none"; fi
fi
echo "run_with_shim.sh: ok"
