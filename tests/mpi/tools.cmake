# Coexistence with other PMPI interposers, and MPI errors inside the engine.
#
# A counting PMPI tool preloaded after the shim sees exactly the calls the shim passes through
# (the tiny ones, MPI_Init*, MPI_Finalize) while the shim still runs the large ones in its engine;
# preloaded before it, the tool bypasses the shim, which says so in one WARN line per process.
add_library(counting_tool SHARED mpi/counting_tool.c)
target_link_libraries(counting_tool PRIVATE MPI::MPI_C)
add_library(fault_injector SHARED mpi/fault_injector.c)
target_link_libraries(fault_injector PRIVATE MPI::MPI_C ${CMAKE_DL_LIBS})
add_executable(tool_stack mpi/tool_stack.c)
target_link_libraries(tool_stack PRIVATE MPI::MPI_C)
add_executable(engine_error mpi/engine_error.c)
target_link_libraries(engine_error PRIVATE MPI::MPI_C)

# The small MPI_Iallreduces go to the MPI's own below GFSHIM_FUSION_MIN_BYTES (the default), so
# the tool sees every one, as with GFSHIM_FUSION=0; fused (GFSHIM_FUSION_MIN_BYTES=0, progress
# in calls or by a thread) the shim runs them itself and the tool sees none.
set(GFSHIM_TOOL_ENV --env GFSHIM_ALGO=ring --env GFSHIM_SEGMENT_BYTES=256K)
set(GFSHIM_TOOL_VARIANTS "fusion1:1:64K:auto:7" "fusion0:0:64K:auto:7" "fused_thread:1:0:thread:0")
if(GFSHIM_MPI STREQUAL "openmpi")
  list(APPEND GFSHIM_TOOL_VARIANTS "fused_calls:1:0:calls:0")
else()
  # MPICH has no progress hook: progress in calls is only on request, with a warning (docs/calls.md).
  add_test(NAME mpi_progress_calls_without_a_progress_hook_warns
           COMMAND ${GFSHIM_RUN} --shim $<TARGET_FILE:gfshim>:$<TARGET_FILE:counting_tool> --np 2
                   ${GFSHIM_TOOL_ENV} --env GFSHIM_PROGRESS=calls --env GFSHIM_FUSION_MIN_BYTES=0
                   --expect-engine
                   --expect "GFSHIM WARN INIT: GFSHIM_PROGRESS=calls: this MPI has no progress hook"
                   --expect "tool_stack: rank 0: 7 small \\+ 7 small nonblocking \\+ 3 large allreduces, all correct"
                   --expect "counting_tool: rank 0: init 1 allreduce 7 iallreduce 0 finalize 1"
                   -- $<TARGET_FILE:tool_stack> 7 3)
endif()
foreach(variant ${GFSHIM_TOOL_VARIANTS})
  string(REPLACE ":" ";" fields "${variant}")
  list(GET fields 0 fusion_name)
  list(GET fields 1 fusion)
  list(GET fields 2 fusion_min)
  list(GET fields 3 progress)
  list(GET fields 4 seen_iallreduce)
  add_test(NAME mpi_tool_after_shim_sees_passthrough_calls_${fusion_name}
           COMMAND ${GFSHIM_RUN} --shim $<TARGET_FILE:gfshim>:$<TARGET_FILE:counting_tool> --np 2
                   ${GFSHIM_TOOL_ENV} --env GFSHIM_FUSION=${fusion}
                   --env GFSHIM_FUSION_MIN_BYTES=${fusion_min} --env GFSHIM_PROGRESS=${progress}
                   --expect-engine
                   --expect "GFSHIM STATS engine +ring \\(GFSHIM_ALGO=ring\\) +6 "
                   --expect "tool_stack: rank 0: 7 small \\+ 7 small nonblocking \\+ 3 large allreduces, all correct"
                   --expect "tool_stack: rank 1: 7 small \\+ 7 small nonblocking \\+ 3 large allreduces, all correct"
                   --expect "counting_tool: rank 0: init 1 allreduce 7 iallreduce ${seen_iallreduce} finalize 1"
                   --expect "counting_tool: rank 1: init 1 allreduce 7 iallreduce ${seen_iallreduce} finalize 1"
                   --reject "GFSHIM WARN" -- $<TARGET_FILE:tool_stack> 7 3)
  set_tests_properties(mpi_tool_after_shim_sees_passthrough_calls_${fusion_name} PROPERTIES
                       TIMEOUT 120)
endforeach()
add_test(NAME mpi_tool_before_shim_warns
         COMMAND ${GFSHIM_RUN} --shim $<TARGET_FILE:counting_tool>:$<TARGET_FILE:gfshim> --np 2
                 ${GFSHIM_TOOL_ENV}
                 --expect "GFSHIM WARN INIT: .*libcounting_tool.so defines MPI_Init, MPI_Init_thread, MPI_Finalize, MPI_Allreduce, MPI_Iallreduce ahead of libgfshim.so.*Put libgfshim.so first in LD_PRELOAD"
                 --expect "tool_stack: rank 0: .* all correct" --expect "tool_stack: rank 1: .* all correct"
                 --expect "counting_tool: rank 0: init 1 allreduce 10 iallreduce 7 finalize 1"
                 --expect "counting_tool: rank 1: init 1 allreduce 10 iallreduce 7 finalize 1"
                 --reject "GFSHIM STATS" -- $<TARGET_FILE:tool_stack> 7 3)

# An MPI error inside the engine after sending started: the application (MPI_ERRORS_RETURN) gets
# a code whose MPI_Error_string names what failed in the shim and whose class is the original
# error's. One rank fails and aborts (its peer waits for its data): no hang. Every rank fails
# before sending anything: the pending receives are cancelled, the communicator reports later
# calls as failed, and MPI_Finalize completes.
# MPICH 4.0.2 cannot carry the text (its MPI_Error_string misreads codes added to a predefined
# class): there the application gets the original code, and the WARN line names the failure.
if(GFSHIM_MPI STREQUAL "mpich")
  set(GFSHIM_ERROR_TEXT "Other MPI error")
  set(GFSHIM_ERROR_AGAIN_TEXT "Other MPI error")
else()
  set(GFSHIM_ERROR_TEXT "libgfshim: allreduce failed: PMPI_Isend: ")
  set(GFSHIM_ERROR_AGAIN_TEXT
      "libgfshim: allreduce failed: an earlier allreduce on this communicator failed")
endif()
set(GFSHIM_FAULT_SHIM $<TARGET_FILE:gfshim>:$<TARGET_FILE:fault_injector>)
set(GFSHIM_FAULT_ENV --env GFSHIM_MIN_BYTES=0 --env GFSHIM_ALGO=ring --env GFSHIM_FUSION=0)
add_test(NAME mpi_engine_error_reaches_errhandler_and_abort_ends_job
         COMMAND ${GFSHIM_RUN} --shim ${GFSHIM_FAULT_SHIM} --np 2 ${GFSHIM_FAULT_ENV}
                 --env FAULT_INJECT_CALL=PMPI_Isend --env FAULT_INJECT_NTH=2 --env FAULT_INJECT_RANK=0
                 --expect-fail
                 --expect "fault_injector: rank 0: PMPI_Isend call 2 returns MPI_ERR_OTHER"
                 --expect "engine_error: rank 0: MPI_Allreduce returned class [0-9]+ \\(same as MPI_ERR_OTHER: yes\\): ${GFSHIM_ERROR_TEXT}"
                 --expect "GFSHIM WARN ENGINE: allreduce failed: PMPI_Isend: "
                 --expect "engine_error: rank 0 calls MPI_Abort"
                 -- $<TARGET_FILE:engine_error> abort)
add_test(NAME mpi_engine_error_on_every_rank_then_finalize
         COMMAND ${GFSHIM_RUN} --shim ${GFSHIM_FAULT_SHIM} --np 2 ${GFSHIM_FAULT_ENV}
                 --env FAULT_INJECT_CALL=PMPI_Isend --env FAULT_INJECT_NTH=1 --env FAULT_INJECT_RANK=-1
                 --expect "engine_error: rank 0: MPI_Allreduce returned class [0-9]+ \\(same as MPI_ERR_OTHER: yes\\): ${GFSHIM_ERROR_TEXT}"
                 --expect "engine_error: rank 1: MPI_Allreduce returned class [0-9]+ \\(same as MPI_ERR_OTHER: yes\\): ${GFSHIM_ERROR_TEXT}"
                 --expect "engine_error: rank 0: second MPI_Allreduce returned class [0-9]+ \\(same as MPI_ERR_OTHER: yes\\): ${GFSHIM_ERROR_AGAIN_TEXT}"
                 --expect "engine_error: rank 0 finalized" --expect "engine_error: rank 1 finalized"
                 -- $<TARGET_FILE:engine_error> continue)
set_tests_properties(mpi_tool_before_shim_warns
                     mpi_engine_error_reaches_errhandler_and_abort_ends_job
                     mpi_engine_error_on_every_rank_then_finalize PROPERTIES TIMEOUT 120)
