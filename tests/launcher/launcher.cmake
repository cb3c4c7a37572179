# gfshimrun, the launcher (issue 21): tools/gfshimrun run by tests/launcher/check_gfshimrun.sh,
# which gives it this build's shim in a scratch layout (GFSHIM_LIBDIR unless --layout says
# otherwise) and checks its exit status and output. The dry runs compare whole lines, so the
# injected options, their order and their place right after the launcher word are all checked.
set(GFSHIM_LAUNCHER_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_gfshimrun.sh
    --gfshimrun ${PROJECT_SOURCE_DIR}/tools/gfshimrun --shim $<TARGET_FILE:gfshim> --flavour ${GFSHIM_MPI})
set(GFSHIM_LAUNCHER_PROGRAM $<TARGET_FILE:allreduce_conformance>)
# The launcher as users type it: Open MPI's plain mpirun where it is this build's (Debian's
# alternatives: mpirun -> mpirun.openmpi -> orterun), otherwise the build's own mpiexec.
set(GFSHIM_LAUNCHER ${MPIEXEC_EXECUTABLE})
find_program(GFSHIM_PLAIN_MPIRUN mpirun)
if(GFSHIM_MPI STREQUAL "openmpi" AND GFSHIM_PLAIN_MPIRUN)
  file(REAL_PATH ${GFSHIM_PLAIN_MPIRUN} gfshim_plain_real)
  file(REAL_PATH ${MPIEXEC_EXECUTABLE} gfshim_mpiexec_real)
  if(gfshim_plain_real STREQUAL gfshim_mpiexec_real)
    set(GFSHIM_LAUNCHER mpirun)
  endif()
endif()
# Per flavour: what gfshimrun inserts for the settings of the tests below, a value that needs
# quoting, and launcher options of which one has an executable (/bin/true, no MPI) as its value,
# so that the program is found only if that value is skipped.
if(GFSHIM_MPI STREQUAL "openmpi")
  set(gfshim_other_flavour mpich)
  set(gfshim_other_launcher_name mpiexec.mpich)
  set(gfshim_preload "-x LD_PRELOAD=@TMP@/lib/openmpi/libgfshim.so")
  set(gfshim_settings "-x GFSHIM_ALGO=ring -x GFSHIM_STATS=1")
  set(gfshim_quoted "-x 'GFSHIM_CONFIG=@TMP@/it'\\''s my.conf'")
  set(gfshim_launcher_options -np 2 --mca plm_rsh_agent /bin/true -x B=2 --map-by core)
else()
  set(gfshim_other_flavour openmpi)
  set(gfshim_other_launcher_name mpirun.openmpi)
  set(gfshim_preload "-genv LD_PRELOAD @TMP@/lib/mpich/libgfshim.so")
  set(gfshim_settings "-genv GFSHIM_ALGO ring -genv GFSHIM_STATS 1")
  set(gfshim_quoted "-genv GFSHIM_CONFIG '@TMP@/it'\\''s my.conf'")
  set(gfshim_launcher_options -n 2 -launcher-exec /bin/true -genv A 1 -ppn 2)
endif()
string(JOIN " " gfshim_launcher_options_text ${gfshim_launcher_options})

add_test(NAME launcher_help COMMAND ${GFSHIM_LAUNCHER_CHECK} --expect "^usage: gfshimrun "
                                    --expect "--dry-run" -- --help)

# A real job, the shim found through GFSHIM_LIBDIR and active in both ranks; GFSHIM_LIBDIR itself
# (gfshimrun's setting) does not reach the ranks, where the shim would call it unknown.
add_test(NAME launcher_runs_the_shim
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --env GFSHIM_STATS=1 --expect-engine
                 --expect "^[0-9]+ passed, 0 failed" --reject "unknown parameter"
                 -- --set GFSHIM_ALGO=ring -s MIN_BYTES=0
                 ${GFSHIM_LAUNCHER} -np 2 ${GFSHIM_LAUNCHER_PROGRAM} -q)
set_tests_properties(launcher_runs_the_shim PROPERTIES TIMEOUT 300)

# Dry runs: GFSHIM_* of the environment passed on, --set winning over them, sorted by name; the
# launcher's own options before the program left as they were.
add_test(NAME launcher_dry_run_${GFSHIM_MPI}
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --env GFSHIM_STATS=1 --env GFSHIM_ALGO=torus2d
                 --expect-line "${GFSHIM_LAUNCHER} ${gfshim_preload} ${gfshim_settings} ${gfshim_launcher_options_text} ${GFSHIM_LAUNCHER_PROGRAM} -q"
                 -- --dry-run --set ALGO=ring ${GFSHIM_LAUNCHER} ${gfshim_launcher_options}
                 ${GFSHIM_LAUNCHER_PROGRAM} -q)
# Quoting: a value with a blank and a quote comes out as a shell would need it.
add_test(NAME launcher_dry_run_quotes_for_the_shell
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --env "GFSHIM_CONFIG=@TMP@/it's my.conf"
                 --expect-line "${GFSHIM_LAUNCHER} ${gfshim_preload} ${gfshim_quoted} -np 2 ${GFSHIM_LAUNCHER_PROGRAM}"
                 -- --dry-run -- ${GFSHIM_LAUNCHER} -np 2 ${GFSHIM_LAUNCHER_PROGRAM})
# Slurm: srun --export, the values being in a comma-separated list; a comma inside one is refused.
add_test(NAME launcher_dry_run_srun
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --fake-srun --env GFSHIM_STATS=1
                 --expect-line "srun --export=ALL,LD_PRELOAD=@TMP@/lib/${GFSHIM_MPI}/libgfshim.so,GFSHIM_ALGO=ring,GFSHIM_STATS=1 -n 2 --exclusive --partition debug ${GFSHIM_LAUNCHER_PROGRAM} -q"
                 -- --dry-run -s GFSHIM_ALGO=ring srun -n 2 --exclusive --partition debug
                 ${GFSHIM_LAUNCHER_PROGRAM} -q)
add_test(NAME launcher_srun_refuses_a_comma_in_a_value
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --fake-srun --status 2
                 --expect "srun --export cannot carry the comma in GFSHIM_DEBUG_SUBSYS=POLICY,ENGINE"
                 -- --dry-run -s DEBUG_SUBSYS=POLICY,ENGINE srun -n 2 ${GFSHIM_LAUNCHER_PROGRAM})
# Run for real (a fake srun that prints what it got): LD_PRELOAD reaches the ranks through
# --export only, never the launcher's own environment, nor does GFSHIM_LIBDIR.
add_test(NAME launcher_preloads_the_ranks_not_the_launcher
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --fake-srun
                 --expect-line "fake srun: LD_PRELOAD=unset GFSHIM_LIBDIR=unset"
                 --expect-line "fake srun: --export=ALL,LD_PRELOAD=@TMP@/lib/${GFSHIM_MPI}/libgfshim.so -n 2 ${GFSHIM_LAUNCHER_PROGRAM}"
                 -- srun -n 2 ${GFSHIM_LAUNCHER_PROGRAM})

# Where the library is found: the installed layout (PREFIX/bin/gfshimrun and
# PREFIX/lib/gfshim/FLAVOUR/libgfshim.so), and a refusal that names every place looked at.
string(REPLACE "@TMP@/lib/" "@TMP@/prefix/lib/gfshim/" gfshim_installed_preload "${gfshim_preload}")
add_test(NAME launcher_finds_the_installed_library
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --layout installed
                 --expect-line "${GFSHIM_LAUNCHER} ${gfshim_installed_preload} -np 2 ${GFSHIM_LAUNCHER_PROGRAM}"
                 -- --dry-run ${GFSHIM_LAUNCHER} -np 2 ${GFSHIM_LAUNCHER_PROGRAM})
add_test(NAME launcher_refuses_without_a_library
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --layout none --status 2
                 --expect "no libgfshim\\.so for ${GFSHIM_MPI}; looked at:"
                 --expect "^  @TMP@/lib/${GFSHIM_MPI}/libgfshim\\.so$"
                 --expect "^  @TMP@/prefix/lib/gfshim/${GFSHIM_MPI}/libgfshim\\.so$"
                 -- --dry-run ${GFSHIM_LAUNCHER} -np 2 ${GFSHIM_LAUNCHER_PROGRAM})

# Refusals about the program: built for the other MPI than the launcher's (run for real: the
# refusal comes before anything starts), linked to no MPI; --mpi overrides the detection.
find_program(GFSHIM_OTHER_LAUNCHER ${gfshim_other_launcher_name})
if(GFSHIM_OTHER_LAUNCHER)
  add_test(NAME launcher_refuses_${GFSHIM_MPI}_program_under_${gfshim_other_flavour}_launcher
           COMMAND ${GFSHIM_LAUNCHER_CHECK} --status 2
                   --expect "the program uses ${GFSHIM_MPI} but the launcher .*${gfshim_other_launcher_name} is ${gfshim_other_flavour}'s"
                   -- ${GFSHIM_OTHER_LAUNCHER} -np 2 ${GFSHIM_LAUNCHER_PROGRAM} -q)
endif()
add_test(NAME launcher_refuses_a_program_without_mpi
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --status 2 --expect "cannot tell which MPI /bin/true uses"
                 -- ${GFSHIM_LAUNCHER} -np 2 /bin/true)
add_test(NAME launcher_mpi_option_overrides_detection
         COMMAND ${GFSHIM_LAUNCHER_CHECK}
                 --expect-line "${GFSHIM_LAUNCHER} ${gfshim_preload} ${gfshim_settings} -np 2 /bin/true"
                 -- --dry-run --mpi ${GFSHIM_MPI} -s ALGO=ring -s STATS=1 ${GFSHIM_LAUNCHER} -np 2 /bin/true)

# Python: the flavour of the interpreter's mpi4py (Debian's is built against Open MPI); an
# interpreter without mpi4py is refused.
execute_process(COMMAND /usr/bin/python3 -c "import mpi4py" RESULT_VARIABLE gfshim_no_mpi4py
                OUTPUT_QUIET ERROR_QUIET)
if(GFSHIM_MPI STREQUAL "openmpi" AND gfshim_no_mpi4py EQUAL 0)
  add_test(NAME launcher_python_takes_the_flavour_of_mpi4py
           COMMAND ${GFSHIM_LAUNCHER_CHECK}
                   --expect-line "${GFSHIM_LAUNCHER} ${gfshim_preload} -np 2 /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/python/test_mpi4py.py"
                   -- --dry-run ${GFSHIM_LAUNCHER} -np 2 /usr/bin/python3
                   ${PROJECT_SOURCE_DIR}/tests/python/test_mpi4py.py)
endif()
add_test(NAME launcher_refuses_python_without_mpi4py
         COMMAND ${GFSHIM_LAUNCHER_CHECK} --fake-python3 --status 2
                 --expect "python3 cannot import mpi4py"
                 -- --dry-run ${GFSHIM_LAUNCHER} -np 2 python3 ${PROJECT_SOURCE_DIR}/tests/python/test_mpi4py.py)
