// Communicators the application makes (MPI_Comm_dup, _split, _split_type, _create,
// _create_group): the shim makes each one's fusion communicator at once, inside the same call,
// where every member is by definition, and its fusion queue, which sets up its topology and
// transport there. Making it later, at the communicator's first
// MPI_Iallreduce, would put a collective inside a nonblocking call: ranks that start Iallreduces
// on two communicators in different orders would deadlock, and Open MPI 4.1 hung with a
// nonblocking MPI_Comm_idup pending beside a blocking communicator creation.
#include <mpi.h>

#include "common/log.h"
#include "engine/policy.h"
#include "hooks/hook_api.h"
#include "hooks/runtime.h"

namespace gfshim::hooks {

void prepareFusionOn(Runtime& rt, MPI_Comm comm) {
  CommState* state = nullptr;
  Status status = rt.registry.stateFor(comm, rt.paramsAgree, &state);
  if (!status.isOk()) return;
  // The same answer on every member: no fusion where the engine never runs.
  Plan engine;
  engine.route = Route::kEngine;
  if (planOnComm(engine, state->facts()).route == Route::kPassthrough) return;
  status = rt.registry.prepareFusion(comm, *state);
  if (status.isOk()) status = ensureFusionQueue(rt, *state);
  if (!status.isOk()) {
    GFSHIM_WARN(kEngine, "no fusion on a new communicator: %s", status.message().c_str());
  }
}

Status ensureFusionQueue(Runtime& rt, CommState& state) {
  if (state.fusion || state.fusionComm == MPI_COMM_NULL) return Status::ok();
  const FusionSettings fusion{rt.settings, rt.timeline.get()};
  return FusionQueue::create(state.fusionComm, state.facts().rank, state.facts().size, fusion,
                             &rt.stats, &state.fusion);
}

int commCreatedHook(int rc, void* rawComm) noexcept {
  Runtime& rt = runtime();
  if (rc != MPI_SUCCESS || !rt.active.load(std::memory_order_acquire) ||
      !rt.settings.fusionAvailable || ReentryGuard::inside()) {
    return rc;
  }
  const MPI_Comm comm = *static_cast<MPI_Comm*>(rawComm);
  if (comm == MPI_COMM_NULL) return rc;
  ReentryGuard guard;
  try {
    prepareFusionOn(rt, comm);
  } catch (...) {
    GFSHIM_WARN(kEngine, "no fusion on a new communicator: unexpected exception");
  }
  return rc;
}

}  // namespace gfshim::hooks
