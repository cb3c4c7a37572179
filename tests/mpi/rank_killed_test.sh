#!/usr/bin/env bash
# Runs tests/mpi/rank_killed.c through run_with_shim.sh (with --expect-fail and --time-limit
# BOUND: the job must end by itself, non-zero) and then checks the kill itself:
#   - the victim announced its SIGKILL from inside an operation, and at that moment at least one
#     peer was waiting for the victim's data: inside an operation (its last "entered"/"returned"
#     line before the kill is an "entered"), or already returned from the victim's operation (a
#     ring lets the others finish before the victim's last receive) and so about to block in the
#     next, which the victim never enters; every rank's state at the kill is printed (the program
#     makes every rank announce the kill operation before the victim's clock starts);
#   - the time from the SIGKILL to the end of the job, printed as "kill-to-exit: S s", is at most
#     BOUND seconds.
# usage: rank_killed_test.sh BOUND RUN_WITH_SHIM [run_with_shim.sh arguments, with --np N]
set -euo pipefail
bound=$1 run=$2
shift 2
np=""
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  [[ ${args[i]} == --np ]] && np=${args[i + 1]}
done
[[ -n $np ]] || { echo "rank_killed_test.sh: no --np given" >&2; exit 2; }

output=$("$run" --expect-fail --time-limit "$bound" "$@" 2>&1) && status=0 || status=$?
echo "$output"
fail() { echo "rank_killed_test.sh: FAILED: $*"; exit 1; }
[[ $status -eq 0 ]] || fail "run_with_shim.sh failed (see above)"

kill_line=$(grep -E '^rank_killed: victim rank [0-9]+ raises SIGKILL at ' <<<"$output" | head -1 || true)
[[ -n $kill_line ]] || fail "the victim never announced its SIGKILL"
killed=$(awk '{ print $8 }' <<<"$kill_line")
ended=$(sed -n 's/^# wall: .* ended at \([0-9.]*\)$/\1/p' <<<"$output" | tail -1)
[[ -n $ended ]] || fail "no end time from run_with_shim.sh"
# rank, event (entered|returned), operation, time
events=$(sed -En 's/^rank_killed: rank ([0-9]+) (entered|returned from) operation ([0-9]+) at ([0-9.]+).*/\1 \2 \3 \4/p' <<<"$output" |
         sed 's/ from / /')
victim=$(awk '{ print $4 }' <<<"$kill_line")
kill_op=$(awk '{ print $11 }' <<<"$kill_line")
inside=$(awk -v k="$killed" -v np="$np" -v v="$victim" -v ko="$kill_op" '
  $4 <= k && (!($1 in at) || $4 >= at[$1]) { at[$1] = $4; what[$1] = $2; op[$1] = $3 }
  END {
    inside = 0
    for (r = 0; r < np; ++r) {
      if (!(r in what)) { printf "rank %d still before operation %d; ", r, ko; continue }
      if (what[r] != "entered") {
        printf "rank %d between operations (returned from %d); ", r, op[r]
        if (r != v && op[r] >= ko) ++inside  # its next operation needs the victim, who never enters it
        continue
      }
      printf "rank %d in operation %d for %.1f ms; ", r, op[r], (k - at[r]) * 1e3
      if (r != v) ++inside
    }
    printf "%d of %d peers waiting for the victim", inside, np - 1
    exit inside == 0 }' <<<"$events") || fail "no peer was waiting for the victim at the kill: $inside"
echo "rank_killed_test.sh: at the kill: $inside"
awk -v k="$killed" -v e="$ended" -v b="$bound" 'BEGIN {
  printf "rank_killed_test.sh: kill-to-exit: %.3f s (bound %s s)\n", e - k, b
  exit !(e - k <= b) }' || fail "kill-to-exit above the bound"
echo "rank_killed_test.sh: ok"
