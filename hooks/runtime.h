// Process-wide state of the shim between MPI_Init and MPI_Finalize: the loaded configuration,
// the cross-rank agreement, the communicator registry and the statistics. Set up by the init
// hook; read-only afterwards except for the statistics (atomics) and per-communicator state.
#pragma once

#include <atomic>

#include "config/config.h"
#include "engine/comm_registry.h"
#include "engine/stats.h"

namespace gfshim::hooks {

struct Runtime {
  Config config = Config::defaults();
  Settings settings;
  CommRegistry registry;
  Stats stats;
  bool paramsAgree = false;  // plan-relevant parameters equal on every rank of MPI_COMM_WORLD
  bool statsWanted = false;  // some rank asked for GFSHIM_STATS (agreed, so the report is collective)
  int worldRank = -1;
  int worldSize = 0;
  std::atomic<bool> active{false};  // MPI_Init went through the hook and the shim is set up
};

Runtime& runtime();

// Every MPI call the shim makes below the hooks goes to PMPI; a hook entered while this thread is
// already inside the shim (an MPI library calling back into MPI_*) forwards straight to PMPI.
class ReentryGuard {
 public:
  ReentryGuard() { depth_++; }
  ~ReentryGuard() { depth_--; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  static bool inside() { return depth_ > 0; }

 private:
  static thread_local int depth_;
};

}  // namespace gfshim::hooks
