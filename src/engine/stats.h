// Per-process counters behind GFSHIM_STATS, and the report rank 0 prints at MPI_Finalize after
// the counters of all ranks were reduced (sums, except time: the slowest rank).
//
// Cost: record() is on every intercepted call, including the pass-through of tiny allreduces,
// so it must cost a few nanoseconds. Each thread owns a block of counters it alone writes (plain
// loads and stores, no locked read-modify-write); snapshot() sums the blocks of all threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/policy.h"

namespace gfshim {

// Lossy modes: fp16, bf16, csc, csc+fp16, csc+bf16.
constexpr int kLossyModeCount = 5;
int lossyModeIndex(const LossyModes& modes);  // -1 for exact
const char* lossyModeName(int index);
enum LossyCounter {
  kLossyCalls,
  kLossyBytesIn,         // the calls' payload
  kLossyWireBytes,       // what this rank sent, norms and overflow redos included
  kLossyExactWire,       // what the exact ring would have sent: bytes x 2(p-1)/p
  kLossyRedos,           // calls redone exactly after an overflow
  kLossySparseElements,  // elements of the calls that ran sparse (after warm-up)
  kLossySentElements,    // of those, elements in the selected chunks
  kLossyMomentumElements,  // elements of the calls with momentum correction (GFSHIM_CSC_MOMENTUM)
  kLossyClippedElements,   // elements of the calls whose input was clipped (GFSHIM_CSC_CLIP)
  kLossyShadowCalls,
  kLossyShadowErrorSum,  // relative L2 error x 1e12, summed over shadowed calls
  kLossyShadowErrorMax,  // relative L2 error x 1e12, largest
  kLossyCounterCount
};

// One lossy call, as the engine measured it.
struct LossyRecord {
  LossyModes modes;
  uint64_t bytesIn = 0;
  uint64_t wireBytes = 0;
  int commSize = 1;
  bool redone = false;
  uint64_t sparseElements = 0;
  uint64_t sentElements = 0;
  uint64_t momentumElements = 0;
  uint64_t clippedElements = 0;
  bool shadowed = false;
  double shadowError = 0;  // relative L2 error of the lossy result against the exact one
};

// Calls with a GPU buffer on some rank, per way they went (summed over ranks): calls and bytes.
enum GpuPathCounter {
  kGpuNccl,          // reduced by NCCL on the GPUs
  kGpuStagedEngine,  // staged through host memory, reduced by the engine's host algorithm
  kGpuStagedMpi,     // a pass-through call staged through host memory around the PMPI call
  kGpuFused,         // a fused MPI_Iallreduce packed from / unpacked to device memory
  kGpuToMpi,         // a device pointer handed to the MPI (it must be CUDA-aware)
  kGpuPathCount
};
const char* gpuPathName(int path);

enum FusionCounter {
  kFusionRounds,
  kFusionOps,
  kFusionQueuedNanos,
  kFusionProgressNanos,
  kFusionBlockedWaits,  // progress in calls: blocked in the MPI for a transfer (progressAllOrBlock)
  kFusionCounterCount
};

struct StatsCounters {
  uint64_t calls[kReasonCount] = {};
  uint64_t bytes[kReasonCount] = {};     // payload: count x datatype size
  uint64_t busBytes[kReasonCount] = {};  // bytes x 2(p-1)/p, for bus bandwidth as nccl-tests
  uint64_t nanos[kReasonCount] = {};     // engine time; after the reduction the slowest rank's
  // Lazy fusion (summed over ranks): negotiation rounds, operations completed, the total time
  // operations spent between MPI_Iallreduce and completion, and the time the shim's progress
  // took: its threads' CPU time, or with progress in calls the time inside the queues' tasks.
  uint64_t fusion[kFusionCounterCount] = {};
  // Lossy modes (summed over ranks), per mode (lossyModeIndex) and LossyCounter.
  uint64_t lossy[kLossyModeCount][kLossyCounterCount] = {};
  uint64_t gpu[kGpuPathCount][2] = {};  // [path][0: calls, 1: bytes]
};

class Stats {
 public:
  Stats();
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;
  ~Stats();

  // `commSize` and `nanos` only matter for engine calls (0 for pass-through).
  void record(Reason reason, uint64_t bytes, int commSize, uint64_t nanos);
  // Lazy fusion, from the progress threads.
  void recordFusion(uint64_t rounds, uint64_t ops, uint64_t queuedNanos);
  void recordFusionProgress(uint64_t nanos);
  void recordFusionBlockedWait();
  void recordLossy(const LossyRecord& record);
  void recordGpu(GpuPathCounter path, uint64_t bytes);
  StatsCounters snapshot() const;

  struct ThreadBlock;  // opaque; defined in stats.cpp

 private:
  ThreadBlock* blockOfThisThread();
  ThreadBlock* registerThisThread();

  std::atomic<ThreadBlock*> blocks_{nullptr};  // lock-free list, one block per recording thread
  // Unique over the process's lifetime, so a thread's cached block of a destroyed Stats is never
  // taken for one of a Stats that reuses its address (and never read).
  uint64_t id_;
};

// `summed` holds counters summed over `ranks` ranks, with nanos as the maximum over ranks (the
// shadow errors are identical on every rank, so their sums are divided by `ranks`).
std::string formatStatsReport(const StatsCounters& summed, int ranks);

}  // namespace gfshim
