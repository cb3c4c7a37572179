#!/usr/bin/env bash
# Fuzzes the two parsers of user text with libFuzzer + ASan + UBSan (tests/fuzz/):
#   fuzz_config    Config::load: GFSHIM_* environment entries and the GFSHIM_CONFIG file
#   fuzz_topology  parseTopology: the GFSHIM_TOPO_FILE format
# Usage: scripts/fuzz.sh [seconds per target, default 60]
# Configures build-fuzz with clang, builds only the fuzz targets, and runs each for the given
# time on a copy of its seed corpus (build-fuzz/fuzz/corpus/<target>, which keeps growing between
# local runs; the source tree is never written). Exits non-zero on a crash, leak, timeout or
# sanitizer report and prints the path of the input that caused it
# (build-fuzz/fuzz/artifacts/<target>/crash-*), with the command that reproduces it.
set -euo pipefail
seconds=${1:-60}
if [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [seconds per target, default 60]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
work="$build/fuzz"
jobs=${FUZZ_JOBS:-$(nproc)}
# Seconds one input may take (wall clock) before it counts as a hang: parsing one input takes
# well under a millisecond, so the default only trips on a real hang, even on a loaded machine.
timeout=${FUZZ_TIMEOUT:-60}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGFSHIM_FUZZ=ON -DGFSHIM_BUILD_CUDA=OFF -DGFSHIM_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_config fuzz_topology

# The config dictionary: the fixed tokens plus every parameter name and accepted choice.
mkdir -p "$work"
{
  cat "$root/tests/fuzz/config.dict"
  grep -o '^GFSHIM_PARAM([A-Z0-9_]*' "$root/config/params.def" | sed 's/^GFSHIM_PARAM(//' |
    while read -r name; do
      printf '"GFSHIM_%s"\n"%s"\n' "$name" "${name,,}"
    done
  grep -o '^GFSHIM_PARAM([A-Z0-9_]*, [A-Za-z]*, "[^"]*", "[^"]*"' "$root/config/params.def" |
    sed 's/.*, "\([^"]*\)"$/\1/' | tr '|' '\n' | sed 's/\.\./\n/' | grep -v '^$' | sort -u |
    sed 's/.*/"&"/'
} >"$work/config.dict"
cp "$root/tests/fuzz/topology.dict" "$work/topology.dict"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if command -v llvm-symbolizer >/dev/null; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}
fi

status=0
summary=()
for parser in config topology; do
  target="fuzz_$parser"
  corpus="$work/corpus/$parser"
  artifacts="$work/artifacts/$parser"
  log="$work/$target.log"
  mkdir -p "$corpus" "$artifacts"
  cp "$root/tests/fuzz/corpus/$parser/"* "$corpus/"
  echo "== $target: ${seconds} s on $corpus (log: $log)"
  start=$(date +%s.%N)
  rc=0
  (cd "$work" && "$work/$target" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 \
     -max_len=4096 -dict="$work/$parser.dict" -artifact_prefix="$artifacts/" \
     -print_final_stats=1 "$corpus") >"$log" 2>&1 || rc=$?
  elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  if [[ $rc -eq 0 ]]; then
    result=ok
  else
    status=1
    result="FAILED (exit $rc)"
    grep -E -A1 'ERROR: |runtime error|GFSHIM_FUZZ_CHECK' "$log" | head -20 || true
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [[ -n $artifact ]]; then
      echo "$target: failing input $artifact"
      echo "$target: reproduce with $work/$target $artifact"
    else
      tail -30 "$log"
    fi
  fi
  summary+=("$(printf '%-14s %12s execs %8s s %8s exec/s %6s corpus  %s' "$target" \
    "${runs:-?}" "$elapsed" "${rate:-?}" "$units" "$result")")
done
echo "== fuzz summary (${seconds} s per target)"
printf '%s\n' "${summary[@]}"
exit $status
