# The real NCCL plugin (cuda/nccl_plugin.cpp) without a GPU: built from its own sources against an
# emulated CUDA runtime and its kernels' CPU references (libgfshim_emulated_gpu.so) instead of
# libcudart and nvcc's kernels, and run against a fake libnccl.so.2 whose collectives go between
# the ranks through shared memory, all over the fake CUDA driver's device memory, which the host
# cannot touch (tests/gpu_emul/emulated_gpu.h). gpu_buffers_fake compares every result with
# PMPI_Allreduce on host copies, and in its csc mode the CSC results with the host engine's, so
# these tests check the plugin's own logic: the ring and torus shapes, in-place calls, the fp16/bf16
# wire and its overflow redo, the CSC steps and their residuals, fused buckets, nonblocking setup,
# stream ordering, and an abort. Not checked here: the CUDA kernels (tests/gpu/, on a GPU only),
# NCCL itself, and anything of a real device's timing.
add_library(gfshim_emulated_gpu SHARED gpu_emul/emulated_cudart.cpp gpu_emul/emulated_kernels.cpp)
set_target_properties(gfshim_emulated_gpu PROPERTIES CXX_VISIBILITY_PRESET default
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/emulnccl)
target_include_directories(gfshim_emulated_gpu PRIVATE gpu_emul ${PROJECT_SOURCE_DIR}/cuda
                           ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(gfshim_emulated_gpu PRIVATE ${GFSHIM_WARNINGS})
target_link_libraries(gfshim_emulated_gpu PRIVATE gfshim_core fake_cuda_driver Threads::Threads
                      -Wl,--no-undefined)

set(GFSHIM_EMULATED_NCCL_DIR ${CMAKE_CURRENT_BINARY_DIR}/emulnccl/nccl)
add_library(emulated_nccl SHARED gpu_emul/fake_nccl.cpp gpu_emul/shm_collectives.cpp)
set_target_properties(emulated_nccl PROPERTIES OUTPUT_NAME nccl SOVERSION 2
                      CXX_VISIBILITY_PRESET default
                      LIBRARY_OUTPUT_DIRECTORY ${GFSHIM_EMULATED_NCCL_DIR})
target_include_directories(emulated_nccl PRIVATE gpu_emul ${NCCL_INCLUDE_DIR}
                           ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(emulated_nccl PRIVATE ${GFSHIM_WARNINGS})
target_link_libraries(emulated_nccl PRIVATE gfshim_emulated_gpu gfshim_core Threads::Threads rt
                      -Wl,--no-undefined)

# The plugin from its sources. It dlopens libnccl.so.2: the ranks get LD_LIBRARY_PATH set to the
# fake's folder (a run path would not do: a sanitizer's dlopen interceptor searches its own).
add_library(emulated_nccl_plugin SHARED ${PROJECT_SOURCE_DIR}/cuda/nccl_plugin.cpp
            ${PROJECT_SOURCE_DIR}/cuda/nccl_library.cpp)
set_target_properties(emulated_nccl_plugin PROPERTIES OUTPUT_NAME gfshim_cuda
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/emulnccl)
target_include_directories(emulated_nccl_plugin PRIVATE ${PROJECT_SOURCE_DIR}/cuda
                           ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(emulated_nccl_plugin PRIVATE ${GFSHIM_WARNINGS})
target_link_libraries(emulated_nccl_plugin PRIVATE gfshim_emulated_gpu gfshim_core
                      ${CMAKE_DL_LIBS} Threads::Threads
                      "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cuda/gfshim_cuda.map"
                      -Wl,--no-undefined)
add_dependencies(emulated_nccl_plugin emulated_nccl)
gfshim_shim_beside_plugin(emulated_nccl_shim ${CMAKE_CURRENT_BINARY_DIR}/emulnccl
                          emulated_nccl_plugin emulated_nccl)
set(GFSHIM_EMULATED_NCCL_SHIM ${GFSHIM_SHIM_BESIDE_PLUGIN})

add_executable(shm_collectives_test gpu_emul/shm_collectives_test.cpp gpu_emul/shm_collectives.cpp)
target_include_directories(shm_collectives_test PRIVATE gpu_emul)
target_compile_options(shm_collectives_test PRIVATE ${GFSHIM_WARNINGS})
target_link_libraries(shm_collectives_test PRIVATE gfshim_core GTest::gtest_main Threads::Threads rt)
add_test(NAME shm_collectives COMMAND shm_collectives_test)

set(GFSHIM_EMULATED_RUN ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_with_shim.sh --mpi ${GFSHIM_MPI}
    --launcher ${MPIEXEC_EXECUTABLE} --shim ${GFSHIM_EMULATED_NCCL_SHIM} --time-limit 180
    --env LD_LIBRARY_PATH=${GFSHIM_EMULATED_NCCL_DIR} --env FAKE_CUDA_DEVICES=4
    --env GFSHIM_GPU_STAGING_BYTES=64K)
# A nearly full GPU on rank 1: the plugin's allocations may hold 1 KiB there.
set(GFSHIM_EMULATED_FULL_GPU_ON_RANK1 --env FAKE_CUDA_RUNTIME_MEMORY_BYTES=1024
    --env FAKE_CUDA_RUNTIME_MEMORY_RANK=1)
set(GFSHIM_EMULATED_CHECKS --expect-engine --expect "gpu_buffers: .* checks passed"
    --expect "GFSHIM STATS gpu NCCL +[1-9]" --reject "aborted" --reject "WARN"
    --reject "emulated GPU:")

# Exact ring: blocking calls (int/float/double, SUM/MAX, in place or not, short counts) and fused
# buckets through ncclAllReduce.
add_test(NAME mpi_gpu_nccl_emulated_ring
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} ${GFSHIM_EMULATED_CHECKS}
                 --expect "emulated NCCL rank 0/${GFSHIM_NCCL_TEST_NP}: destroyed, [1-9][0-9]* allreduce, 0 reduce-scatter"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused nohost)
# Groups of several communicators: a duplicate of the world and its halves (one of a single rank
# when the world is odd, whose MPI_Iallreduces are staged as blocking calls), each freed.
add_test(NAME mpi_gpu_nccl_emulated_communicators
         COMMAND ${GFSHIM_EMULATED_RUN} --np 3 ${GFSHIM_EMULATED_CHECKS}
                 --expect "emulated NCCL rank 1/2: destroyed, [1-9][0-9]* allreduce"
                 -- $<TARGET_FILE:gpu_buffers_fake> comms nohost)
# A blocking call through NCCL while an MPI_Iallreduce waits in the fusion thread's queue (which
# gathers for 500 ms): the blocking call first waits for it, so the two NCCL groups of the GPU
# never run at once; without that wait none of the three is complete when the blocking call
# returns.
add_test(NAME mpi_gpu_nccl_emulated_blocking_call_after_a_queued_iallreduce
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_CYCLE_MS=500
                 ${GFSHIM_EMULATED_CHECKS}
                 --expect "gpu_buffers: beside: 3 of 3 fused operations complete when the blocking call returned"
                 -- $<TARGET_FILE:gpu_buffers_fake> beside)
# The application's inputs still pending on a stream of its own: the plugin's stream must wait
# for an event on the legacy default stream first.
add_test(NAME mpi_gpu_nccl_emulated_after_pending_application_copies
         COMMAND ${GFSHIM_EMULATED_RUN} --np 2 ${GFSHIM_EMULATED_CHECKS}
                 -- $<TARGET_FILE:gpu_buffers_fake> pending fused nohost)
if(GFSHIM_MPI STREQUAL "openmpi")
  # Torus 2x2: row reduce-scatter, column allreduce, row allgather, and a world allreduce for the
  # tail of counts that do not divide by the row.
  add_test(NAME mpi_gpu_nccl_emulated_torus2x2
           COMMAND ${GFSHIM_EMULATED_RUN} --np 4 --env GFSHIM_ALGO=torus2d
                   --env GFSHIM_TORUS_DIMS=2x2 ${GFSHIM_EMULATED_CHECKS}
                   --expect "emulated NCCL rank 1/2: destroyed, 0 allreduce, [1-9][0-9]* reduce-scatter, [1-9][0-9]* allgather"
                   -- $<TARGET_FILE:gpu_buffers_fake> fused nohost lossy)
endif()
# 16 bits on the wire, blocking and fused (values exact in both formats).
foreach(codec fp16 bf16)
  add_test(NAME mpi_gpu_nccl_emulated_${codec}
           COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_COMPRESS=${codec}
                   --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_CHECKS}
                   --expect "GFSHIM STATS lossy ${codec} +[1-9]"
                   -- $<TARGET_FILE:gpu_buffers_fake> lossy fused nohost)
endforeach()
# Lossy calls through NCCL against the host engine's, call after call on the same buffers (so
# the residuals too), bit for bit: CSC (a quarter of the chunks after one dense warm-up call)
# exact and with fp16 on the wire, and fp16 alone; the last call overflows fp16 (the redo).
foreach(variant "csc_none 0.25 none 0" "csc_fp16 0.25 fp16 [1-9]" "fp16 0 fp16 [1-9]")
  separate_arguments(variant)
  list(GET variant 0 name)
  list(GET variant 1 density)
  list(GET variant 2 codec)
  list(GET variant 3 redos)
  add_test(NAME mpi_gpu_nccl_emulated_against_host_${name}
           COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_CSC_DENSITY=${density}
                   --env GFSHIM_CSC_WARMUP_CALLS=1 --env GFSHIM_COMPRESS=${codec}
                   --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_CHECKS}
                   --expect "gpu_buffers: CSC or 16 bits, .* device results identical to host"
                   --expect "GFSHIM STATS lossy .* ${redos}[0-9]* overflow redos"
                   -- $<TARGET_FILE:gpu_buffers_fake> csc)
endforeach()
# Momentum correction and clipping: the plugin has neither, so CSC calls on device buffers are
# staged through host memory (none reaches NCCL; without momentum the same calls all do), and
# their results are the host engine's, call after call.
add_test(NAME mpi_gpu_nccl_emulated_csc_momentum_is_staged
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_CSC_DENSITY=0.25
                 --env GFSHIM_CSC_WARMUP_CALLS=1 --env GFSHIM_CSC_MOMENTUM=0.5
                 --env GFSHIM_CSC_CLIP=1e6 --env GFSHIM_COMPRESS_MIN_BYTES=64K
                 --expect-engine --expect "gpu_buffers: .* checks passed" --reject "aborted"
                 --reject "WARN" --reject "emulated GPU:"
                 --expect "gpu_buffers: CSC or 16 bits, .* device results identical to host"
                 --expect "GFSHIM STATS lossy csc .*momentum-corrected"
                 --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]"
                 --reject "GFSHIM STATS gpu NCCL"
                 -- $<TARGET_FILE:gpu_buffers_fake> csc)
if(GFSHIM_MPI STREQUAL "openmpi")
  add_test(NAME mpi_gpu_nccl_emulated_torus2x2_against_host_csc_fp16
           COMMAND ${GFSHIM_EMULATED_RUN} --np 4 --env GFSHIM_ALGO=torus2d --env GFSHIM_TORUS_DIMS=2x2
                   --env GFSHIM_CSC_DENSITY=0.25 --env GFSHIM_CSC_WARMUP_CALLS=1
                   --env GFSHIM_COMPRESS=fp16 --env GFSHIM_COMPRESS_MIN_BYTES=64K
                   ${GFSHIM_EMULATED_CHECKS}
                   --expect "gpu_buffers: CSC or 16 bits, .* device results identical to host"
                   --expect "emulated NCCL rank 0/2: destroyed, 0 allreduce, [1-9][0-9]* reduce-scatter"
                   -- $<TARGET_FILE:gpu_buffers_fake> csc)
endif()
# Devices without memory pools (plain cudaMalloc, and cudaFree, which waits for the whole
# device), and device memory the driver reports no context for (cudaMallocAsync pools).
add_test(NAME mpi_gpu_nccl_emulated_without_memory_pools
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_CUDA_MEMORY_POOLS=0
                 --env GFSHIM_COMPRESS=fp16 --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_CHECKS}
                 -- $<TARGET_FILE:gpu_buffers_fake> fused nohost lossy)
add_test(NAME mpi_gpu_nccl_emulated_without_a_context
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_CUDA_NULL_CONTEXT=1
                 ${GFSHIM_EMULATED_CHECKS} -- $<TARGET_FILE:gpu_buffers_fake> fused nohost)
# One rank's GPU is nearly full (GFSHIM_EMULATED_FULL_GPU_ON_RANK1). Without room for
# CSC's sparse scratch it asks for dense calls: every rank runs every CSC call dense, so the
# results are exact (a sparse one would not compare). Without room for the dense fallback's
# either (fp16 on the wire), every rank declines the call through NCCL and stages it instead:
# the results are the host engine's, with one WARN per rank and no error.
add_test(NAME mpi_gpu_nccl_emulated_csc_without_sparse_scratch_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_CSC_DENSITY=0.25
                 --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_FULL_GPU_ON_RANK1}
                 ${GFSHIM_EMULATED_CHECKS}
                 --expect "GFSHIM STATS lossy csc +[1-9]"
                 -- $<TARGET_FILE:gpu_buffers_fake> lossy)
add_test(NAME mpi_gpu_nccl_emulated_csc_without_any_scratch_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_CSC_DENSITY=0.25
                 --env GFSHIM_CSC_WARMUP_CALLS=1 --env GFSHIM_COMPRESS=fp16
                 --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_FULL_GPU_ON_RANK1}
                 --expect-engine --reject "emulated GPU:"
                 --expect "gpu_buffers: CSC or 16 bits, .* device results identical to host"
                 --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: an NCCL allreduce could not run \\(NCCL allreduce: device allocation of [0-9]+ bytes for the 16-bit wire values: out of memory"
                 --reject "allreduce failed"
                 -- $<TARGET_FILE:gpu_buffers_fake> csc)
# The same nearly full GPU with fp16 on the wire, blocking calls and fused buckets: a call whose
# scratch grows is agreed first, so every rank stages those calls (results exact in fp16) instead
# of the peers waiting inside NCCL for the rank that failed alone (the deadline, 600 s, is past
# the test's time limit).
add_test(NAME mpi_gpu_nccl_emulated_16_bits_without_scratch_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_COMPRESS=fp16
                 --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_EMULATED_FULL_GPU_ON_RANK1}
                 --env GFSHIM_NCCL_TIMEOUT_SEC=600
                 --expect-engine --reject "emulated GPU:" --reject "allreduce failed"
                 --expect "gpu_buffers: .* checks passed, 0 calls returned an error"
                 --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: an NCCL (fused )?allreduce could not run \\(NCCL (fused )?allreduce: device allocation of [0-9]+ bytes"
                 -- $<TARGET_FILE:gpu_buffers_fake> lossy fused nohost)
# One rank's NCCL initialisation fails asynchronously: every rank stages instead.
add_test(NAME mpi_gpu_nccl_emulated_initialisation_fails_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_NCCL_FAIL_INIT_RANK=1
                 --expect-engine --expect "gpu_buffers: .* checks passed"
                 --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]" --reject "GFSHIM STATS gpu NCCL"
                 --expect "emulated NCCL rank 0/${GFSHIM_NCCL_TEST_NP}: aborted"
                 --reject "emulated GPU:"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
# One rank's NCCL initialisation never finishes: after GFSHIM_NCCL_TIMEOUT_SEC every rank stages,
# and the communicators still initialising are aborted.
add_test(NAME mpi_gpu_nccl_emulated_initialisation_hangs_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_NCCL_HANG_INIT_RANK=1
                 --env GFSHIM_NCCL_TIMEOUT_SEC=2
                 --expect-engine --expect "gpu_buffers: .* checks passed"
                 --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]" --reject "GFSHIM STATS gpu NCCL"
                 --expect "emulated NCCL rank 1/${GFSHIM_NCCL_TEST_NP}: aborted"
                 --reject "emulated GPU:"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
# One rank's first allreduce fails there, before it takes part; it aborts its communicators.
# NCCL's abort is local: its peers' calls fail at their deadline (2 s here), and every rank
# reports the error. Where the transport sees the closed connection (FAKE_NCCL_ABORT_REACHES_PEERS,
# as sockets or InfiniBand would), the peers' collectives end at once with a remote error, long
# before the deadline (600 s, past the test's time limit): a collective ended that way must never
# count as done, even though its stream drained. Either way the job goes on to its end.
add_test(NAME mpi_gpu_nccl_emulated_call_fails_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_NCCL_FAIL_CALL_RANK=1
                 --env GFSHIM_NCCL_TIMEOUT_SEC=2 --reject "emulated GPU:"
                 --expect "gpu_buffers: .* checks passed, [1-9][0-9]* calls returned an error on rank 0"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: .*\\(world\\): unhandled system error"
                 --expect "\\[0\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: the allreduce did not complete within 2 s"
                 --expect "emulated NCCL rank 1/${GFSHIM_NCCL_TEST_NP}: aborted"
                 -- $<TARGET_FILE:gpu_buffers_fake> errors)
add_test(NAME mpi_gpu_nccl_emulated_call_fails_on_one_rank_seen_by_the_transport
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_NCCL_FAIL_CALL_RANK=1
                 --env FAKE_NCCL_ABORT_REACHES_PEERS=1 --env GFSHIM_NCCL_TIMEOUT_SEC=600
                 --reject "emulated GPU:"
                 --expect "gpu_buffers: .* checks passed, [1-9][0-9]* calls returned an error on rank 0"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: .*\\(world\\): unhandled system error"
                 --expect "\\[0\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: .*\\(world\\): remote process exited"
                 -- $<TARGET_FILE:gpu_buffers_fake> errors)
# One rank's first allreduce never takes part: every rank's call fails at the deadline (or at
# the abort of a peer that reached it first), and the job goes on to its end.
add_test(NAME mpi_gpu_nccl_emulated_call_hangs_on_one_rank
         COMMAND ${GFSHIM_EMULATED_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env FAKE_NCCL_HANG_CALL_RANK=1
                 --env GFSHIM_NCCL_TIMEOUT_SEC=2 --reject "emulated GPU:"
                 --expect "gpu_buffers: .* checks passed, [1-9][0-9]* calls returned an error on rank 0"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: the allreduce did not complete within 2 s \\(GFSHIM_NCCL_TIMEOUT_SEC\\)"
                 -- $<TARGET_FILE:gpu_buffers_fake> errors)
