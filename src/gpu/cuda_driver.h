// The CUDA driver API as libgfshim.so uses it: which memory a buffer is in, and the copies that
// stage device buffers through host memory. Compiled into every build (no CUDA toolkit needed):
// the few driver entry points are declared here by their stable ABI and bound with dlsym.
//
// The shim never loads the driver itself. CudaDriver::inProcess() finds libcuda.so.1 only if the
// application (or its CUDA runtime, PyTorch, ...) already loaded it (dlopen RTLD_NOLOAD): a
// process without it cannot hold device memory, so every buffer is host memory. It looks again
// at most once per tick of the coarse monotonic clock, and then only after the dynamic loader
// loaded something new, so a CPU-only job pays a clock read (~5 ns) per call it asks about.
//
// Ordering: copies run on a blocking stream of the buffer's context (or are synchronous), so they
// are ordered after the application's work on the legacy default stream; like any CUDA-aware MPI,
// the shim cannot see work on the application's other streams, which must be complete before the
// MPI call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/types.h"

namespace gfshim {

struct BufferPlacement {
  MemKind kind = MemKind::kHost;
  int device = -1;              // CUDA device ordinal of device memory
  void* context = nullptr;      // its CUcontext: the allocating one, else the device's primary
  bool primaryContext = false;  // `context` is the device's primary context (NCCL runs there)
};

// Where one call's send and receive buffers are (send == recv for MPI_IN_PLACE).
struct BufferPlacements {
  BufferPlacement send;
  BufferPlacement recv;
  bool anyDevice() const { return send.kind == MemKind::kDevice || recv.kind == MemKind::kDevice; }
  // Both on one GPU in its primary context: what NCCL can reduce in place of the MPI (memory of
  // a context the application made itself is staged).
  bool ncclPlaceable() const {
    return send.kind == MemKind::kDevice && recv.kind == MemKind::kDevice &&
           send.device == recv.device && send.primaryContext && recv.primaryContext;
  }
};

class CudaDriver {
 public:
  // The driver the process has loaded, or nullptr. Thread-safe.
  static const CudaDriver* inProcess();
  // Host for anything the driver does not know as device memory (pageable or pinned host memory,
  // or any pointer while the driver is uninitialized). Managed memory counts as device memory:
  // staging copies it correctly wherever the host may not touch it. Memory the driver reports no
  // context for (stream-ordered allocations, cudaMallocAsync pools) gets its device's primary
  // context.
  BufferPlacement placementOf(const void* pointer) const;
  // Both buffers of a call, asked once when they are the same buffer. All host when `driver` is
  // null (a process without the driver holds no device memory).
  static BufferPlacements placementsOf(const CudaDriver* driver, const void* send,
                                       const void* recv);

  // The device's PCI bus id, "0000:07:00.0" (lower case, as hwloc writes it).
  Status pciBusId(int device, std::string* busId) const;

  // Synchronous copies in `context` (ordered after its legacy default stream). copyToDevice
  // returns when the data is in device memory (a pageable source alone would let it return
  // once the data is in the driver's staging buffer).
  Status copyToHost(void* context, void* host, const void* device, size_t bytes) const;
  Status copyToDevice(void* context, void* device, const void* host, size_t bytes) const;

  // A blocking stream and `events` events in `context`, for the staging pipeline.
  Status createStream(void* context, void** stream) const;
  void destroyStream(void* context, void* stream) const;
  Status createEvent(void* context, void** event) const;
  void destroyEvent(void* context, void* event) const;
  Status copyToHostAsync(void* context, void* host, const void* device, size_t bytes,
                         void* stream) const;
  Status copyToDeviceAsync(void* context, void* device, const void* host, size_t bytes,
                           void* stream) const;
  Status recordEvent(void* context, void* event, void* stream) const;
  // Makes `stream`'s later work wait for everything queued so far on the legacy default stream,
  // which itself waits for every blocking stream (a per-thread default stream included): the
  // order a synchronous copy would get. `event` is recorded on stream 0 for it.
  Status orderAfterLegacyStream(void* context, void* event, void* stream) const;
  Status waitEvent(void* context, void* event) const;
  Status synchronize(void* context, void* stream) const;

  // Page-locks host memory for asynchronous copies (cuMemHostRegister, portable), in `context`.
  Status pinHost(void* context, void* host, size_t bytes) const;
  void unpinHost(void* context, void* host) const;

  struct Api;  // the bound entry points (cuda_driver.cpp)

 private:
  explicit CudaDriver(const Api* api) : api_(api) {}

  Status check(int result, const char* what) const;
  // The device's primary context, retained at the first call that finds it active (or, with
  // evenIfInactive, at the first call); nullptr otherwise.
  void* primaryContextOf(int device, bool evenIfInactive) const;
  const Api* api_;
};

}  // namespace gfshim
