# The CUDA kernels (gpu_kernels.h): a static library the plugin links, its GPU test (skips where
# no CUDA device is present) and its benchmark (exits 77 without a device).
#
# --fmad=false: the kernels must round like the CPU references (no a*b+c contraction); they also
# spell the roundings out with __fmul_rn/__fadd_rn, so this is a second line of defence.
set(GFSHIM_CUDA_WARNINGS
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>
    $<$<COMPILE_LANGUAGE:CXX>:${GFSHIM_WARNINGS}>)

add_library(gfshim_cuda_kernels STATIC ${CMAKE_CURRENT_SOURCE_DIR}/gpu_kernels.cu)
target_include_directories(gfshim_cuda_kernels PUBLIC ${PROJECT_SOURCE_DIR}/src
                           ${PROJECT_SOURCE_DIR}/cuda ${PROJECT_SOURCE_DIR}/config
                           ${CMAKE_BINARY_DIR}/generated ${PROJECT_SOURCE_DIR})
target_link_libraries(gfshim_cuda_kernels PUBLIC CUDA::cudart_static)
target_compile_options(gfshim_cuda_kernels PRIVATE ${GFSHIM_CUDA_WARNINGS}
                       $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false -ftz=false>)
set_target_properties(gfshim_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON
                      CUDA_SEPARABLE_COMPILATION OFF)

if(GFSHIM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  add_executable(gpu_kernels_test ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_kernels_test.cpp)
  target_link_libraries(gpu_kernels_test PRIVATE gfshim_cuda_kernels gfshim_core GTest::gtest_main)
  target_compile_options(gpu_kernels_test PRIVATE ${GFSHIM_WARNINGS})
  # One ctest entry for the whole binary: every test skips uniformly without a device, and the
  # SKIPPED marker makes ctest report "skipped" rather than "passed".
  add_test(NAME gpu_kernels COMMAND $<TARGET_FILE:gpu_kernels_test>)
  set_tests_properties(gpu_kernels PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endif()

add_executable(gpu_kernel_bench ${PROJECT_SOURCE_DIR}/bench/gpu_kernel_bench.cu)
target_link_libraries(gpu_kernel_bench PRIVATE gfshim_cuda_kernels)
target_compile_options(gpu_kernel_bench PRIVATE ${GFSHIM_CUDA_WARNINGS})
set_target_properties(gpu_kernel_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
