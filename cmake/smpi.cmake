# The third flavour, -DGFSHIM_MPI=smpi (issue 19): the shim on thousands of simulated ranks with
# SimGrid's SMPI (Debian libsimgrid-dev). SMPI runs a program as a shared object that smpirun
# loads once per simulated rank (smpi/privatization:dlopen), so every global of the program,
# the shim's included, is private to its rank. A preloaded or separately linked libgfshim.so is
# not called there: the shim's hooks are linked into each simulated program instead
# (libgfshim_smpi.a, whole archive), and its MPI_* definitions take the program's calls. No shim
# thread runs: progress is in calls (the application's own MPI calls drive fused work) and the
# stall watchdog is off, since a real thread cannot make simulated MPI calls.
#
# The library's sources are compiled by the system compiler against SMPI's mpi.h, not by
# smpicxx: smpicxx force-includes smpi_helpers.h, whose macros rename malloc, free, sleep and
# clock_gettime (std::free would become std::smpi_shared_free). The simulated programs are C
# and get the same helpers as smpicc would give them.
find_program(SMPIRUN_EXECUTABLE smpirun)
find_path(SMPI_INCLUDE_DIR mpi.h PATHS /usr/include/smpi NO_DEFAULT_PATH)
find_library(SIMGRID_LIBRARY simgrid)
if(NOT SMPIRUN_EXECUTABLE OR NOT SMPI_INCLUDE_DIR OR NOT SIMGRID_LIBRARY)
  message(FATAL_ERROR "GFSHIM_MPI=smpi needs SimGrid's SMPI (Debian: apt install libsimgrid-dev); "
                      "found smpirun='${SMPIRUN_EXECUTABLE}' mpi.h='${SMPI_INCLUDE_DIR}' "
                      "libsimgrid='${SIMGRID_LIBRARY}'")
endif()
add_library(MPI::MPI_C INTERFACE IMPORTED)
target_include_directories(MPI::MPI_C INTERFACE ${SMPI_INCLUDE_DIR})
target_link_libraries(MPI::MPI_C INTERFACE ${SIMGRID_LIBRARY})
# Every target: the core's thread-locals change their TLS model too (common/static_tls.h).
add_compile_definitions(GFSHIM_SMPI)
set(MPI_C_INCLUDE_DIRS ${SMPI_INCLUDE_DIR})
set(MPIEXEC_EXECUTABLE ${SMPIRUN_EXECUTABLE})

# Called after gfshim_core and gfshim_mpi exist: the static shim, the simulated programs (each
# built twice: with the shim linked in, and plain, which is SMPI's own allreduce) and their tests.
function(gfshim_smpi_targets)
  add_library(gfshim_smpi STATIC ${GFSHIM_HOOK_SOURCES})
  target_include_directories(gfshim_smpi PRIVATE . src ${CMAKE_BINARY_DIR}/generated)
  target_compile_options(gfshim_smpi PRIVATE ${GFSHIM_WARNINGS})
  find_package(Threads REQUIRED)
  target_link_libraries(gfshim_smpi PUBLIC gfshim_mpi Threads::Threads)
  set_target_properties(gfshim_smpi PROPERTIES ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

  set(programs allreduce_conformance:tests/mpi/allreduce_conformance.c
               allreduce_bench:bench/allreduce_bench.c
               gradient_replay:bench/gradient_replay.c)
  foreach(entry IN LISTS programs)
    string(REPLACE ":" ";" parts ${entry})
    list(GET parts 0 name)
    list(GET parts 1 source)
    foreach(variant shim native)
      set(target ${name}_${variant})
      add_executable(${target} ${source})
      target_compile_options(${target} PRIVATE -fPIC -include ${SMPI_INCLUDE_DIR}/smpi_helpers.h)
      target_link_options(${target} PRIVATE -shared)
      if(variant STREQUAL "shim")
        target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,gfshim_smpi>")
      endif()
      target_link_libraries(${target} PRIVATE MPI::MPI_C m)
      set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/smpi)
    endforeach()
  endforeach()

  if(GFSHIM_BUILD_TESTS)
    add_subdirectory(tests/smpi)
  endif()
endfunction()
