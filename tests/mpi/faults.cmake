# A rank that dies inside an allreduce (engine path, fused path) ends the whole job.
#
# tests/mpi/rank_killed.c: every rank loops over large allreduces; the victim kills itself with
# SIGKILL from a helper thread while all ranks are inside one (blocking: one MPI_Allreduce on the
# engine's ring or torus; fused: a burst of MPI_Iallreduce in MPI_Waitall, fused by the shim).
# tests/mpi/rank_killed_test.sh requires a non-zero exit that the MPI itself produced within
# the bound (a `timeout` kill fails the test as a hang), the MPI's own abort report, that a peer
# was waiting for the victim's data when it died, and prints the kill-to-exit time.
add_executable(rank_killed mpi/rank_killed.c)
target_link_libraries(rank_killed PRIVATE MPI::MPI_C Threads::Threads)

set(GFSHIM_KILL_BOUND 60)
set(GFSHIM_KILL_TEST ${CMAKE_CURRENT_SOURCE_DIR}/mpi/rank_killed_test.sh ${GFSHIM_KILL_BOUND}
    ${GFSHIM_RUN})
if(GFSHIM_MPI STREQUAL "mpich")
  # hydra: "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES / PID ... / EXIT CODE: 9" and
  # "EXIT STRING: Killed (signal 9)" for the victim; the block may instead name a peer that ended
  # first: UCX aborts a peer whose CMA read from the dead rank fails ("process_vm_readv ...
  # No such process": "Aborted (signal 6)"), or hydra's own cleanup ("Terminated (signal 15)").
  set(GFSHIM_KILL_NP 3)
  set(GFSHIM_KILL_REPORT --expect "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
      --expect "TERMINATED WITH THE EXIT STRING: (Killed|Aborted|Terminated) \\(signal (9|6|15)\\)")
else()
  # mpirun (Debian: mpiexec.openmpi): "mpiexec.openmpi noticed that process rank 1 with PID 0 on
  # node vm exited on signal 9 (Killed)."; or, when a peer's non-zero exit reaches it first,
  # "mpiexec.openmpi detected that one or more processes exited with non-zero status".
  set(GFSHIM_KILL_NP 4)
  set(GFSHIM_KILL_REPORT
      --expect "(mpirun|mpiexec[.a-z]*|orterun) (noticed that process rank [0-9]+ with PID [0-9]+ on node .* exited on signal 9|detected that one or more processes exited with non-zero status)")
endif()
# The engine must really take these calls: the blocking plan is logged at INFO; the fused path
# logs no plan, so a companion run of the same configuration where nobody dies (victim -1) shows
# the fused buckets in the stats report.
set(GFSHIM_KILL_ENV --env GFSHIM_MIN_BYTES=0 --env GFSHIM_DEBUG=INFO --env GFSHIM_DEBUG_SUBSYS=POLICY)
set(GFSHIM_KILL_PATH_blocking_ring --expect "-> ring \\(GFSHIM_ALGO=ring\\)")
set(GFSHIM_KILL_PATH_blocking_torus2x2 --expect "-> torus2d \\(grid from GFSHIM_TORUS_DIMS\\)")
set(GFSHIM_KILL_PATH_fused_ring "")
set(GFSHIM_KILL_PATH_fused_torus2x2 "")
set(GFSHIM_KILL_ALGO_ring --env GFSHIM_ALGO=ring)
set(GFSHIM_KILL_ALGO_torus2x2 --env GFSHIM_ALGO=torus2d --env GFSHIM_TORUS_DIMS=2x2)
set(GFSHIM_KILL_COMPANION_blocking --expect-engine)
set(GFSHIM_KILL_COMPANION_fused --expect-engine
    --expect "GFSHIM STATS engine +MPI_Iallreduce fused: buckets reduced by the engine"
    --expect "GFSHIM STATS fusion +[0-9]+ operations in [0-9]+ buckets")

set(GFSHIM_KILL_ALGOS ring)
if(GFSHIM_MPI STREQUAL "openmpi")
  list(APPEND GFSHIM_KILL_ALGOS torus2x2)  # 4 ranks as 2x2; MPICH stays at np 3
endif()
foreach(algo ${GFSHIM_KILL_ALGOS})
  set(np ${GFSHIM_KILL_NP})
  set(victim 1)
  if(algo STREQUAL "torus2x2")
    set(np 4)
    set(victim 2)
  endif()
  foreach(mode blocking fused)
    set(name mpi_rank_killed_${mode}_${algo})
    add_test(NAME ${name}
             COMMAND ${GFSHIM_KILL_TEST} --np ${np} ${GFSHIM_KILL_ENV} ${GFSHIM_MODE_ENV_${mode}}
                     ${GFSHIM_KILL_ALGO_${algo}}
                     ${GFSHIM_KILL_REPORT} ${GFSHIM_KILL_PATH_${mode}_${algo}}
                     -- $<TARGET_FILE:rank_killed> ${mode} ${victim})
    set_tests_properties(${name} PROPERTIES TIMEOUT 200)
    add_test(NAME ${name}_nobody_dies
             COMMAND ${GFSHIM_RUN} --np ${np} ${GFSHIM_KILL_ENV} ${GFSHIM_MODE_ENV_${mode}}
                     ${GFSHIM_KILL_ALGO_${algo}}
                     ${GFSHIM_KILL_PATH_${mode}_${algo}} ${GFSHIM_KILL_COMPANION_${mode}}
                     --expect "rank_killed: ${mode}: 6 operations of 8388608 bytes completed"
                     -- $<TARGET_FILE:rank_killed> ${mode} -1)
    set_tests_properties(${name}_nobody_dies PROPERTIES TIMEOUT 200)
  endforeach()
endforeach()
