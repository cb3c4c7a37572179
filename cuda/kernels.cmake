# Filled in by the kernels work: target gfshim_cuda_kernels (STATIC, POSITION_INDEPENDENT_CODE,
# sources cuda/gpu_kernels.cu), tests/gpu/gpu_kernels_test (gtest; skips without a device), and
# bench/gpu_kernel_bench.
