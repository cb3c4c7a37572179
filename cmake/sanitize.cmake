# Sanitizer builds: -DGFSHIM_SANITIZE=address,undefined (ASan + UBSan) or -DGFSHIM_SANITIZE=thread
# (TSan), one build directory each (scripts/sanitize.sh uses build-asan and build-tsan).
# Everything the project compiles and links gets the flags; findings abort (no recovery), so a
# test that triggers one fails. The sanitizers need their own runtime to see every allocation and
# thread, so link-time optimisation and the static C++ runtime of libgfshim.so are off.
set(GFSHIM_SANITIZE "" CACHE STRING
    "Sanitizers to build with: empty (none), address,undefined, or thread")
set_property(CACHE GFSHIM_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

# libgfshim.so links the C++ runtime statically so it imposes none on the application.
set(GFSHIM_STATIC_RUNTIME -static-libstdc++ -static-libgcc)

if(GFSHIM_SANITIZE)
  if(NOT GFSHIM_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "GFSHIM_SANITIZE must be address,undefined or thread, not '${GFSHIM_SANITIZE}'")
  endif()
  # -O1 (after the build type's -O3, so it wins): what the sanitizers' documentation recommends,
  # exact stack traces, and a much shorter compile than -O3 on a 2-core CI machine.
  set(gfshim_sanitize_flags -fsanitize=${GFSHIM_SANITIZE} -fno-sanitize-recover=all
      -fno-omit-frame-pointer -g -O1)
  add_compile_options(${gfshim_sanitize_flags})
  # GCC 12's flow analysis under the sanitizers' instrumentation reports false
  # -Wmaybe-uninitialized on std::optional members (GCC PR 80635, e.g. RingPhaseTrace); the
  # uninstrumented build keeps the warning as an error.
  add_compile_options(-Wno-maybe-uninitialized)
  add_link_options(-fsanitize=${GFSHIM_SANITIZE})
  # The sanitizer runtimes intercept the C++ runtime's allocation and threading; a second, static
  # copy inside libgfshim.so would bypass them. IPO/LTO would drop the -g frames and inline across
  # the hooks' two declarations of one symbol.
  set(GFSHIM_STATIC_RUNTIME "")
  set(GFSHIM_IPO_SUPPORTED FALSE)
  message(STATUS "libgfshim: sanitizers ${GFSHIM_SANITIZE} (no IPO, shared C++ runtime)")
endif()
