/* The CUDA driver entry points the GPU-buffer tests call to make and fill device memory. They are
 * declared here, by the driver's ABI, so the same test program links against the fake driver
 * (tests/gpu_fake/fake_cuda_driver.c) on a machine without a GPU and against the real libcuda.so.1
 * on a machine with one. */
#ifndef GFSHIM_CUDA_TEST_API_H
#define GFSHIM_CUDA_TEST_API_H
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuDeviceGetCount(int* count);
int cuDeviceGet(int* device, int ordinal);
int cuDevicePrimaryCtxRetain(void** context, int device);
int cuCtxSetCurrent(void* context);
int cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes);
int cuMemFree_v2(CUdeviceptr pointer);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes);
int cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes);
int cuStreamCreate(void** stream, unsigned flags);
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream);

#endif
