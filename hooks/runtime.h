// Process-wide state of the shim between MPI_Init and MPI_Finalize: the loaded configuration,
// the cross-rank agreement, the communicator registry and the statistics. Set up by the init
// hook; read-only afterwards except for the statistics (atomics) and per-communicator state.
#pragma once

#include <atomic>
#include <memory>

#include "common/static_tls.h"
#include "config/config.h"
#include "engine/stats.h"
#include "engine/timeline.h"
#include "mpi/comm_registry.h"

namespace gfshim::hooks {

struct Runtime {
  Config config = Config::defaults();
  Settings settings;
  CommRegistry registry;
  Stats stats;
  std::unique_ptr<Timeline> timeline;  // GFSHIM_TIMELINE
  bool paramsAgree = false;  // plan-relevant parameters equal on every rank of MPI_COMM_WORLD
  bool statsWanted =
      false;  // some rank asked for GFSHIM_STATS (agreed, so the report is collective)
  // The thread level the application asked for and would have got without the shim, which
  // MPI_Query_thread reports; -1 when the shim did not change what it asked PMPI for.
  int applicationThreadLevel = -1;
  bool threadMultiple = false;  // PMPI provided MPI_THREAD_MULTIPLE (for the fusion threads)
  // The program had the CUDA driver loaded when it called MPI_Init, before the MPI started: what
  // the agreement counts as "this rank may hold device buffers". A driver that the MPI's own
  // start-up loads (hwloc's OpenCL or CUDA plugin on a GPU node, a CUDA-enabled UCX) says nothing
  // about the program's buffers.
  bool cudaDriverBeforeInit = false;
  bool progressHookRegistered = false;  // the MPI's progress loop calls FusionQueue::progressAll
  int worldRank = -1;
  int worldSize = 0;
  std::atomic<bool> active{false};  // MPI_Init went through the hook and the shim is set up
};

// Collective over `comm`: makes its fusion communicator where the engine may run on it, and with
// progress in calls also its fusion queue.
void prepareFusionOn(Runtime& rt, MPI_Comm comm);
// Makes the communicator's fusion queue unless it exists (or there is no fusion communicator).
// Local with a progress thread; collective with progress in calls (the queue sets up at once), so
// then called only where every rank makes or sets up the communicator.
Status ensureFusionQueue(Runtime& rt, CommState& state);

namespace detail {
extern Runtime* const gRuntime;
}  // namespace detail
inline Runtime& runtime() { return *detail::gRuntime; }

// Every MPI call the shim makes below the hooks goes to PMPI; a hook entered while this thread is
// already inside the shim (an MPI library calling back into MPI_*) forwards straight to PMPI.
// Initial-exec TLS: the shim is preloaded, so its thread-locals live in static TLS and cost no
// __tls_get_addr call on the pass-through path.
// (__thread rather than thread_local: a trivially initialized int needs no TLS init wrapper.)
namespace detail {
extern __thread int gReentryDepth GFSHIM_STATIC_TLS;
}  // namespace detail

class ReentryGuard {
 public:
  ReentryGuard() { detail::gReentryDepth++; }
  ~ReentryGuard() { detail::gReentryDepth--; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  static bool inside() { return detail::gReentryDepth > 0; }
};

}  // namespace gfshim::hooks
