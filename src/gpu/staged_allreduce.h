// Staging: an allreduce of device buffers through pinned host memory, reduced by the host
// algorithms, so that any MPI (CUDA-aware or not) can allreduce GPU buffers through the shim.
//
// The call's elements are cut into blocks of `blockElements`; block b runs the host plan on
// elements [b*blockElements, ...) through `reduce`. Device buffers go through two pinned slots
// on one blocking stream of the buffer's context, which first waits for the work queued so far
// on the legacy default stream (and so on every blocking stream, as a synchronous copy would):
//
//   stream:  in(0) | in(1)          | out(0) in(2)      | out(1) in(3)  | ...
//   host:          | reduce(0)      | reduce(1)         | reduce(2)     | ...
//
// in(b+1) is enqueued before reduce(b) starts and out(b) right after it ends, so the copies of
// the neighbouring blocks overlap the reduction of this one. Slot b%2 is reused by block b+2:
// its in-copy is enqueued after out(b) on the same stream, and the host touches a slot only after
// waiting for the slot's latest event (its in-copy, or its out-copy when the send buffer is host
// memory). A host buffer (a rank whose gradient is in host memory, or the host side of a mixed
// call) is used in place, block by block, so every rank runs the same sequence of blocks.
//
// Cost: each device byte crosses PCIe once in each direction; with B-byte blocks the pipeline
// adds about one block's copy time to the host allreduce (fill and drain). The copies of both
// directions share one stream, so they do not overlap each other. Memory: 2 slots of
// blockElements x element bytes per communicator (1 slot for a one-block call), bound to the
// GPU's NUMA node where hwloc knows it (MPOL_PREFERRED) and page-locked with cuMemHostRegister;
// if that fails the slots stay pageable (one WARN) and the copies run synchronously.
#pragma once

#include <cstddef>
#include <functional>

#include "common/status.h"
#include "gpu/cuda_driver.h"

namespace gfshim {

class StagingArea {
 public:
  StagingArea() = default;
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;
  ~StagingArea();

  // `slots` (1 or 2) slots of at least `slotBytes` and a stream in `context` (re-made when
  // any of them changes). `numaNode` < 0: no binding. On failure nothing is kept.
  Status prepare(const CudaDriver& driver, void* context, size_t slots, size_t slotBytes,
                 int numaNode);
  std::byte* slot(size_t index) const { return slots_[index % slotCount_]; }
  void* stream() const { return stream_; }
  void* event(size_t index) const { return events_[index % slotCount_]; }
  void* entryEvent() const { return entryEvent_; }  // recorded on stream 0 at each call's start
  // Frees everything (after the stream's work is done); the next prepare makes it again.
  void release();

 private:
  const CudaDriver* driver_ = nullptr;
  void* context_ = nullptr;
  void* stream_ = nullptr;
  void* events_[2] = {nullptr, nullptr};
  void* entryEvent_ = nullptr;
  std::byte* memory_ = nullptr;
  size_t mappedBytes_ = 0;
  size_t slotBytes_ = 0;
  size_t slotCount_ = 1;
  std::byte* slots_[2] = {nullptr, nullptr};
  bool pinned_ = false;
};

// One call's buffers as the staging sees them (send == recv for MPI_IN_PLACE).
struct StagedCall {
  const void* send = nullptr;
  void* recv = nullptr;
  BufferPlacements at;
  size_t count = 0;
  size_t elementBytes = 0;
};

// Host memory in, host memory out: the host plan over `elements` elements starting at element
// `first` of the call. `send` may equal `recv` (in place).
using BlockReduce =
    std::function<Status(const void* send, void* recv, size_t first, size_t elements)>;

// Runs `reduce` over the call's blocks, staging device buffers through `area` (untouched when both
// buffers are host memory; `driver` may then be null). Collective through `reduce` only, and it
// runs `reduce` on every block whatever fails locally (invariant 3: a rank that stopped early
// would leave its peers waiting): a block whose copy in failed is reduced as zeros, and the first
// local failure is returned after the last block, for the caller to report as the call's error.
Status runStagedAllreduce(const CudaDriver* driver, StagingArea& area, int numaNode,
                          const StagedCall& call, size_t blockElements, const BlockReduce& reduce);

}  // namespace gfshim
