#!/usr/bin/env bash
# Runs the tests under the sanitizers (issue 8), in their own build directories:
#   asan      build-asan (GFSHIM_SANITIZE=address,undefined): every test of gfshim_unit_tests
#             (unit and threads-as-ranks) under AddressSanitizer, LeakSanitizer and UBSan
#   tsan      build-tsan (GFSHIM_SANITIZE=thread): the tests that run threads (the
#             threads-as-ranks suites *Fake*, Stats) and the resumable tasks (Task: each
#             switch is announced to TSan as a fiber switch) under ThreadSanitizer, less the
#             two widest sweeps of the compressed ring and the chain
#   tsan-mpi  build-tsan: the fusion queue's progress thread, its round loop progressed in calls,
#             and the stall inspector's watchdog in
#             the real libgfshim.so, preloaded after libtsan.so.2 into fusion_stress /
#             fusion_pending / stall under Open MPI's mpirun; where CUDA's and NCCL's headers
#             exist, also the real NCCL plugin over the emulated GPU (tests/gpu_emul: its stream
#             threads, the fusion thread's and the application's NCCL groups) in gpu_buffers_fake;
#             Open MPI orders its own copies with atomics TSan cannot see, so what the MPI's
#             (uninstrumented) libraries do through TSan's interceptors is ignored
#             (ignore_noninstrumented_modules=1); every access of the shim and the test program
#             is still checked
# usage: scripts/sanitize.sh [asan] [tsan] [tsan-mpi]     (no argument: all three)
# Fails (non-zero) on a failing test or any sanitizer report; prints counts and wall times per
# suite. Logs: build-asan/sanitize-*.log, build-tsan/sanitize-*.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${GFSHIM_SANITIZE_JOBS:-2}
suites=("$@")
[[ ${#suites[@]} -gt 0 ]] || suites=(asan tsan tsan-mpi)

# A report makes a test fail on its own (halt_on_error / -fno-sanitize-recover / exitcode 66);
# the logs are also searched, so a report from a process whose status is lost still fails.
report_re='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer|ThreadSanitizer: reported|FATAL: ThreadSanitizer'
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
tsan_options="halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=4"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

status=0
summary=()
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

configure_and_build() {  # DIR SANITIZERS TARGET...
  local dir=$1 sanitize=$2 start
  shift 2
  start=$(now)
  cmake -S "$root" -B "$root/$dir" -DGFSHIM_SANITIZE="$sanitize" -DGFSHIM_BUILD_CUDA=OFF \
    >"$root/$dir.configure.log" 2>&1 || { cat "$root/$dir.configure.log"; exit 1; }
  mv "$root/$dir.configure.log" "$root/$dir/sanitize-configure.log"
  cmake --build "$root/$dir" -j "$jobs" --target "$@" >"$root/$dir/sanitize-build.log" 2>&1 ||
    { tail -50 "$root/$dir/sanitize-build.log"; exit 1; }
  summary+=("build $dir ($*): $(elapsed "$start") s")
}

# check_log NAME LOG RC START COUNT: records one suite's result.
check_log() {
  local name=$1 log=$2 rc=$3 start=$4 count=$5 reports
  reports=$(grep -Ec -- "$report_re" "$log" || true)
  local line="$name: $count, $reports sanitizer reports, exit $rc, $(elapsed "$start") s"
  if [[ $rc -ne 0 || $reports -ne 0 ]]; then
    status=1
    line="$line  FAILED (see $log)"
    grep -E -A30 -- "$report_re" "$log" | head -120 || true
  fi
  echo "== $line"
  summary+=("$line")
}

run_gtest() {  # NAME DIR FILTER [ENV...]
  local name=$1 dir=$2 filter=$3 log="$root/$2/sanitize-$1.log" start rc=0 count
  shift 3
  start=$(now)
  env "$@" "$root/$dir/tests/gfshim_unit_tests" --gtest_filter="$filter" >"$log" 2>&1 || rc=$?
  count=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1 passed/p' "$log" | tail -1)
  local failed
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed.*/\1 failed/p' "$log" | tail -1)
  count="${count:-0 passed}, ${failed:-0 failed}"
  check_log "$name" "$log" "$rc" "$start" "$count"
}

run_mpi() {  # NAME NP EXPECT [--env NAME=VALUE]... PROGRAM [ARGS...]; $shim: another libgfshim.so
  local name=$1 np=$2 expect=$3 log="$root/build-tsan/sanitize-$1.log" start rc=0
  shift 3
  local envs=()
  while [[ $1 == --env ]]; do envs+=(--env "$2"); shift 2; done
  local tsan
  tsan=$(gcc -print-file-name=libtsan.so.2)
  start=$(now)
  # UCX's memory hooks (libucm, loaded by Open MPI's UCX components) intercept madvise in exiting
  # threads after TSan has dropped their state, and crash: ob1 over self/vader, hooks off.
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx \
  "$root/tests/mpi/run_with_shim.sh" --mpi openmpi --launcher mpirun.openmpi --np "$np" \
    --shim "$tsan ${shim:-$root/build-tsan/libgfshim.so}" \
    --env "TSAN_OPTIONS=$tsan_options ignore_noninstrumented_modules=1" \
    --env UCX_MEM_MMAP_HOOK_MODE=none --env UCX_MEM_MALLOC_HOOKS=no "${envs[@]+"${envs[@]}"}" \
    --expect-engine --expect "$expect" -- "$@" >"$log" 2>&1 || rc=$?
  check_log "$name" "$log" "$rc" "$start" "$np ranks"
}

for suite in "${suites[@]}"; do
  case $suite in
    asan)
      configure_and_build build-asan address,undefined gfshim_unit_tests
      run_gtest asan-ubsan-all build-asan '*'
      ;;
    tsan)
      configure_and_build build-tsan thread gfshim_unit_tests
      # Less the two widest sweeps (28-30 s each under TSan; their smaller siblings run the same
      # threads, and the plain and ASan runs keep the sweeps).
      threaded='*Fake*.*:Stats.*:Task.*'
      threaded+='-CompressedRingFake.IntegerSumsAreExactOverRankCountAndSegmentGrid'
      threaded+=':ChainAllreduceFake.EveryRankHoldsTheRankOrderedSumForEverySegmentSize'
      run_gtest tsan-threads build-tsan "$threaded" "TSAN_OPTIONS=$tsan_options"
      ;;
    tsan-mpi)
      configure_and_build build-tsan thread gfshim fusion_stress fusion_pending stall
      # Every call fused (GFSHIM_FUSION_MIN_BYTES=0, and GFSHIM_ALGO=ring: 3 ranks oversubscribe
      # a 2-core machine, where auto would send lone calls to the MPI's own), by the progress
      # thread and in calls (the round loop as a task on the application's thread, resumed from
      # Open MPI's progress hook).
      run_mpi tsan-fusion-stress-thread-np2 2 "fusion_stress: .* passed" \
        --env GFSHIM_PROGRESS=thread --env GFSHIM_FUSION_MIN_BYTES=0 --env GFSHIM_ALGO=ring \
        "$root/build-tsan/tests/fusion_stress" 3 1002
      run_mpi tsan-fusion-stress-calls-np3 3 "fusion_stress: .* passed" \
        --env GFSHIM_PROGRESS=calls --env GFSHIM_FUSION_MIN_BYTES=0 --env GFSHIM_ALGO=ring \
        "$root/build-tsan/tests/fusion_stress" 2 1003
      run_mpi tsan-fusion-pending-np3 3 "pending at MPI_Comm_free: completed" \
        --env GFSHIM_ALGO=ring "$root/build-tsan/tests/fusion_pending"
      # The stall inspector's watchdog thread asking and answering beside the engine threads.
      run_mpi tsan-stall-inspector-np3 3 "not joined: rank 2" --env GFSHIM_STALL_WARN_SEC=1 \
        --env GFSHIM_MIN_BYTES=0 --env GFSHIM_ALGO=ring "$root/build-tsan/tests/stall" fused 2 3
      if cmake --build "$root/build-tsan" --target help | grep emulated_nccl_shim >/dev/null; then
        configure_and_build build-tsan thread emulated_nccl_shim gpu_buffers_fake
        emulated="$root/build-tsan/tests/emulnccl"
        emulated_env=(--env "LD_LIBRARY_PATH=$emulated/nccl" --env FAKE_CUDA_DEVICES=4
                      --env GFSHIM_GPU_STAGING_BYTES=64K)
        shim="$emulated/libgfshim.so" run_mpi tsan-emulated-nccl-np3 3 \
          "gpu_buffers: .* checks passed" "${emulated_env[@]}" \
          "$root/build-tsan/tests/gpu_buffers_fake" fused nohost
        shim="$emulated/libgfshim.so" run_mpi tsan-emulated-nccl-csc-np3 3 \
          "device results identical to host" "${emulated_env[@]}" --env GFSHIM_CSC_DENSITY=0.25 \
          --env GFSHIM_CSC_WARMUP_CALLS=1 --env GFSHIM_COMPRESS=fp16 \
          --env GFSHIM_COMPRESS_MIN_BYTES=64K "$root/build-tsan/tests/gpu_buffers_fake" csc
      fi
      ;;
    *) echo "sanitize.sh: unknown suite '$suite' (asan, tsan, tsan-mpi)" >&2; exit 2 ;;
  esac
done

echo "== sanitize.sh summary"
printf '   %s\n' "${summary[@]}"
[[ $status -eq 0 ]] && echo "== sanitize.sh: ok" || echo "== sanitize.sh: FAILED"
exit $status
