# The NCCL path without a GPU: a fake plugin (tests/gpu_fake/fake_nccl_plugin.cpp) beside a copy
# of libgfshim.so, under the fake CUDA driver. gpu_buffers_fake compares every result byte for
# byte with PMPI_Allreduce on host copies, so these tests check what the shim does around NCCL:
# the route vote, the unique ids of the world, torus rows and columns, fused buckets reduced by
# the plugin, fp16/bf16 on the wire for both, groups destroyed at the end; the agreed fallback to
# staging, without a hang, when one rank's NCCL setup fails (at preparation, at the start of the
# initialisation, or while it runs) or never finishes (GFSHIM_NCCL_TIMEOUT_SEC); and the call's
# deadline when one rank's allreduce fails alone. Each fault names rank 1; the fake logs whether
# each group was destroyed or aborted.
add_library(fake_nccl_plugin SHARED gpu_fake/fake_nccl_plugin.cpp)
set_target_properties(fake_nccl_plugin PROPERTIES OUTPUT_NAME gfshim_cuda
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fakenccl)
target_include_directories(fake_nccl_plugin PRIVATE gpu_fake ${PROJECT_SOURCE_DIR}/cuda)
target_compile_options(fake_nccl_plugin PRIVATE ${GFSHIM_WARNINGS})
target_link_libraries(fake_nccl_plugin PRIVATE gfshim_core fake_cuda_driver
                      "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cuda/gfshim_cuda.map"
                      -Wl,--no-undefined)
gfshim_shim_beside_plugin(fake_nccl_shim ${CMAKE_CURRENT_BINARY_DIR}/fakenccl fake_nccl_plugin)
set(GFSHIM_FAKE_NCCL_SHIM ${GFSHIM_SHIM_BESIDE_PLUGIN})

set(GFSHIM_FAKE_NCCL_RUN ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_with_shim.sh --mpi ${GFSHIM_MPI}
    --launcher ${MPIEXEC_EXECUTABLE} --shim ${GFSHIM_FAKE_NCCL_SHIM} --time-limit 120
    --env FAKE_CUDA_DEVICES=4 --env GFSHIM_GPU_STAGING_BYTES=64K)
set(GFSHIM_FAKE_NCCL_CHECKS --expect-engine --expect "gpu_buffers: .* checks passed")

add_test(NAME mpi_gpu_nccl_fake_ring
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP} ${GFSHIM_FAKE_NCCL_CHECKS}
                 --expect "GFSHIM STATS gpu NCCL +[1-9]"
                 --expect "fake NCCL rank 0: connected \\(world ${GFSHIM_NCCL_TEST_NP} ranks"
                 --expect "fake NCCL rank 0: group destroyed \\(connected\\)"
                 --reject "aborted" --reject "WARN"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
if(GFSHIM_MPI STREQUAL "openmpi")
  add_test(NAME mpi_gpu_nccl_fake_torus2x2
           COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np 4 --env GFSHIM_ALGO=torus2d
                   --env GFSHIM_TORUS_DIMS=2x2 ${GFSHIM_FAKE_NCCL_CHECKS}
                   --expect "GFSHIM STATS gpu NCCL +[1-9]"
                   --expect "fake NCCL rank 3: connected \\(world 4 ranks, row 2, column 2\\)"
                   --reject "aborted" --reject "WARN"
                   -- $<TARGET_FILE:gpu_buffers_fake> fused)
endif()

# 16 bits on the wire through the plugin, blocking calls and fused buckets (the values are exact
# in both formats, so the comparison stays byte for byte). The fusion queue's group reduces a
# bucket of one operation with the plugin's plain allreduce and larger ones with its fused call.
foreach(codec fp16 bf16)
  add_test(NAME mpi_gpu_nccl_fake_${codec}
           COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP} --env GFSHIM_COMPRESS=${codec}
                   --env GFSHIM_COMPRESS_MIN_BYTES=64K ${GFSHIM_FAKE_NCCL_CHECKS}
                   --expect "GFSHIM STATS gpu NCCL +[1-9]" --expect "GFSHIM STATS lossy ${codec} +[1-9]"
                   --expect "group destroyed \\(connected\\), [1-9][0-9]* calls, 0 fused, [1-9][0-9]* with 16 bits"
                   --expect "group destroyed \\(connected\\), [1-9][0-9]* calls, [1-9][0-9]* fused, [1-9][0-9]* with 16 bits"
                   --reject "aborted" --reject "WARN"
                   -- $<TARGET_FILE:gpu_buffers_fake> lossy fused nohost)
endforeach()

# One rank's NCCL setup goes wrong: every rank stages instead, every group is aborted.
set(GFSHIM_FAKE_NCCL_FALLBACK ${GFSHIM_FAKE_NCCL_CHECKS}
    --expect "GFSHIM STATS gpu staged, host algorithm +[1-9]" --reject "GFSHIM STATS gpu NCCL"
    --expect "fake NCCL rank 0: group aborted" --reject "group destroyed")
add_test(NAME mpi_gpu_nccl_fake_preparation_fails_on_one_rank
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP}
                 --env FAKE_NCCL_FAIL_PREPARE_RANK=1 ${GFSHIM_FAKE_NCCL_FALLBACK}
                 --expect "NCCL not used on this communicator of ${GFSHIM_NCCL_TEST_NP} ranks: NCCL preparation failed on another rank"
                 --expect "NCCL preparation failed here: fake NCCL: injected preparation failure"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
add_test(NAME mpi_gpu_nccl_fake_initialisation_fails_to_start_on_one_rank
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP}
                 --env FAKE_NCCL_FAIL_START_RANK=1 ${GFSHIM_FAKE_NCCL_FALLBACK}
                 --expect "NCCL not used on this communicator of ${GFSHIM_NCCL_TEST_NP} ranks: NCCL initialisation failed on rank 1"
                 --expect "NCCL initialisation failed here \\(rank 1\\): fake NCCL: injected failure to start"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
# Rank 1 takes part in every initialisation, so its peers finish theirs, then fails: they abort
# the communicators they made.
add_test(NAME mpi_gpu_nccl_fake_initialisation_fails_while_running_on_one_rank
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP}
                 --env FAKE_NCCL_FAIL_POLL_RANK=1 ${GFSHIM_FAKE_NCCL_FALLBACK}
                 --expect "fake NCCL rank 0: group aborted \\(connected\\)"
                 --expect "NCCL initialisation failed here \\(rank 1\\): fake NCCL: injected asynchronous failure"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)
add_test(NAME mpi_gpu_nccl_fake_initialisation_hangs_on_one_rank
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP}
                 --env FAKE_NCCL_HANG_RANK=1 --env GFSHIM_NCCL_TIMEOUT_SEC=2
                 ${GFSHIM_FAKE_NCCL_FALLBACK}
                 --expect "NCCL initialisation did not finish within 2 s \\(GFSHIM_NCCL_TIMEOUT_SEC\\)"
                 -- $<TARGET_FILE:gpu_buffers_fake> fused)

# One rank's first NCCL allreduce fails before it sends anything: its peers give up at the call's
# deadline instead of waiting for it forever, every rank reports the error (MPI_ERRORS_RETURN),
# and later engine calls on that communicator fail at once on every rank; the job ends.
add_test(NAME mpi_gpu_nccl_fake_call_fails_on_one_rank
         COMMAND ${GFSHIM_FAKE_NCCL_RUN} --np ${GFSHIM_NCCL_TEST_NP}
                 --env FAKE_NCCL_FAIL_CALL_RANK=1 --env GFSHIM_NCCL_TIMEOUT_SEC=2
                 --expect "gpu_buffers: .* checks passed, [1-9][0-9]* calls returned an error on rank 0"
                 --expect "\\[1\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: fake NCCL: injected failure of a call"
                 --expect "\\[0\\] GFSHIM WARN ENGINE: allreduce failed: NCCL allreduce: .* did not complete within 2 s \\(GFSHIM_NCCL_TIMEOUT_SEC\\)"
                 --expect "\\[0\\] GFSHIM WARN ENGINE: allreduce failed: an earlier allreduce on this communicator failed"
                 -- $<TARGET_FILE:gpu_buffers_fake> errors)
