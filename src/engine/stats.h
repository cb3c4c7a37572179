// Per-process counters behind GFSHIM_STATS, and the report rank 0 prints at MPI_Finalize after
// the counters of all ranks were reduced (sums, except time: the slowest rank).
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
};

class Stats {
 public:
  void record(Reason reason, uint64_t bytes, int commSize, uint64_t nanos);
  StatsCounters snapshot() const;

 private:
  std::atomic<uint64_t> calls_[kReasonCount] = {};
  std::atomic<uint64_t> bytes_[kReasonCount] = {};
  std::atomic<uint64_t> busBytes_[kReasonCount] = {};
  std::atomic<uint64_t> nanos_[kReasonCount] = {};
};

// `summed` holds counters summed over `ranks` ranks, with nanos as the maximum over ranks.
std::string formatStatsReport(const StatsCounters& summed, int ranks);

}  // namespace gfshim
