# The NCCL plugin libgfshim_cuda.so (cuda/nccl_plugin.cpp, cuda/nccl_library.cpp), beside
# libgfshim.so, which dlopens it. Its host code is plain C++ built by the C++ compiler; only the
# kernels (gfshim_cuda_kernels) need nvcc. NCCL is dlopened at run time (nccl.h gives the types),
# the CUDA runtime is linked statically, and the version script exports gfshim_gpu_plugin_api
# alone, so the plugin imposes no libstdc++, libcudart or libnccl on the application.
add_library(gfshim_cuda SHARED
  ${CMAKE_CURRENT_SOURCE_DIR}/nccl_plugin.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/nccl_library.cpp)
target_include_directories(gfshim_cuda PRIVATE
  ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/cuda ${PROJECT_SOURCE_DIR}/config
  ${CMAKE_BINARY_DIR}/generated ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(gfshim_cuda PRIVATE ${GFSHIM_WARNINGS})
find_package(Threads REQUIRED)
target_link_libraries(gfshim_cuda PRIVATE
  gfshim_cuda_kernels gfshim_core CUDA::cudart_static ${CMAKE_DL_LIBS} Threads::Threads
  -static-libstdc++ -static-libgcc
  "-Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/gfshim_cuda.map" -Wl,--no-undefined)
set_target_properties(gfshim_cuda PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gfshim_cuda.map)

# ---- tests/gpu/gpu_plugin_test: dlopens the built plugin by path ------------------------------
# Two ctest entries: the cases that run everywhere (the probe agrees with the machine, the
# table), which must pass here; and the GPU cases, which exit 77 (reported as skipped) when every
# one of them skipped for want of a device. A failure in either is a failure: a skip regex
# would have hidden one, since it outranks the exit status.
if(GFSHIM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  add_executable(gpu_plugin_test ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_plugin_test.cpp)
  target_include_directories(gpu_plugin_test PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/cuda ${PROJECT_SOURCE_DIR}/config
    ${CMAKE_BINARY_DIR}/generated ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(gpu_plugin_test PRIVATE
    GFSHIM_CUDA_PLUGIN_PATH="$<TARGET_FILE:gfshim_cuda>")
  target_compile_options(gpu_plugin_test PRIVATE ${GFSHIM_WARNINGS})
  target_link_libraries(gpu_plugin_test PRIVATE
    gfshim_core GTest::gtest CUDA::cudart_static ${CMAKE_DL_LIBS} Threads::Threads)
  add_dependencies(gpu_plugin_test gfshim_cuda)
  add_test(NAME gpu_plugin_probe
           COMMAND gpu_plugin_test --gtest_filter=GpuPluginEverywhere.*)
  add_test(NAME gpu_plugin
           COMMAND gpu_plugin_test --gtest_filter=GpuPlugin.*)
  set_tests_properties(gpu_plugin PROPERTIES SKIP_RETURN_CODE 77)
endif()
