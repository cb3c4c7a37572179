# Filled in by the plugin work: target gfshim_cuda (SHARED, output name gfshim_cuda, in
# ${CMAKE_BINARY_DIR} beside libgfshim.so), linking gfshim_cuda_kernels and CUDA::cudart_static,
# and tests/gpu/gpu_plugin_test.
