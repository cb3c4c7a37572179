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

struct StatsCounters {
  uint64_t calls[kReasonCount] = {};
  uint64_t bytes[kReasonCount] = {};     // payload: count x datatype size
  uint64_t busBytes[kReasonCount] = {};  // bytes x 2(p-1)/p, for bus bandwidth as nccl-tests
  uint64_t nanos[kReasonCount] = {};     // engine time; after the reduction the slowest rank's
  // Lazy fusion (summed over ranks): negotiation rounds, operations completed, and the total
  // time operations spent between MPI_Iallreduce and completion.
  uint64_t fusion[3] = {};
};
enum FusionCounter { kFusionRounds, kFusionOps, kFusionQueuedNanos };

class Stats {
 public:
  Stats() = default;
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;
  ~Stats();

  // `commSize` and `nanos` only matter for engine calls (0 for pass-through).
  void record(Reason reason, uint64_t bytes, int commSize, uint64_t nanos);
  // Lazy fusion, from the progress threads.
  void recordFusion(uint64_t rounds, uint64_t ops, uint64_t queuedNanos);
  StatsCounters snapshot() const;

  struct ThreadBlock;  // opaque; defined in stats.cpp

 private:
  ThreadBlock* blockOfThisThread();
  ThreadBlock* registerThisThread();

  std::atomic<ThreadBlock*> blocks_{nullptr};  // lock-free list, one block per recording thread
};

// `summed` holds counters summed over `ranks` ranks, with nanos as the maximum over ranks.
std::string formatStatsReport(const StatsCounters& summed, int ranks);

}  // namespace gfshim
