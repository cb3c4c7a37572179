// A GPU emulated on the host, for running the real NCCL plugin (cuda/nccl_plugin.cpp) on machines
// without one: the CUDA runtime calls the plugin makes (emulated_cudart.cpp), its kernels as their
// CPU references (emulated_kernels.cpp) and NCCL (fake_nccl.cpp), all over the device memory of
// the fake CUDA driver (tests/gpu_fake/fake_cuda_driver.c), which the host cannot touch directly.
//
// Streams are asynchronous, as on a GPU: each runs its work in order on a thread of its own, so a
// caller that reads a result before waiting for its stream, or a collective whose peer never
// comes, behaves as it would on a device. An event recorded on the legacy default stream waits
// for the work queued so far on every blocking stream (not on non-blocking ones), as CUDA's does.
#pragma once

#include <cstddef>
#include <functional>

namespace gfshim::emulated {

// The host's view of device memory [pointer, pointer + bytes). A range that is not inside one
// device allocation ends the process with a message naming `what`: on a GPU, a kernel given such
// a pointer faults.
void* deviceView(const void* pointer, size_t bytes, const char* what);

// Queues `work` on `stream` (a cudaStream_t; the legacy default stream runs it at once, after
// every blocking stream's queued work). A nonzero result, a cudaError_t, becomes the stream's
// sticky error: cudaStreamQuery and cudaStreamSynchronize return it from then on.
void enqueue(void* stream, std::function<int()> work);

}  // namespace gfshim::emulated
