// Blocking allreduces whose buffers may be in GPU memory (DESIGN.md, "GPU buffers"): the route is
// agreed where it must be (engine/gpu_route.h), then the call runs through NCCL (the plugin),
// through the staging pipeline around the host algorithm (engine/staged_allreduce.h), or on the
// host directly. Calls the policy passes through are staged around the PMPI call, so an MPI
// without CUDA support never sees a device pointer unless the user asked for that.
#pragma once

#include <functional>

#include "engine/comm_registry.h"
#include "engine/gpu_route.h"
#include "engine/policy.h"
#include "engine/staged_allreduce.h"
#include "hooks/runtime.h"

namespace gfshim::hooks {

// Runs an engine call (plan decided, state set up). `hostReduce` runs the host plan on host
// buffers (one block of the call). *route says what happened; kPassthrough means nothing ran and
// the caller hands the call to the MPI. Errors after the agreement are errors of the call.
Status runPlacedAllreduce(Runtime& rt, CommState& state, const CallInfo& call, const Plan& plan,
                          const void* send, void* recv, const BlockReduce& hostReduce,
                          GpuRoute* route);

// A blocking call the policy passes through for `reason`: when one of its buffers is device
// memory and GFSHIM_GPU_STAGING allows it, copies the buffers to host memory, calls
// `pmpi(send, recv)` with host pointers (MPI_IN_PLACE kept as `inPlaceMarker`), copies the result
// back, sets *handled and returns the MPI's code. Otherwise *handled is false and nothing ran.
// Every rank makes the same PMPI call either way, so no agreement is needed.
int stagedPassthrough(Runtime& rt, const CallInfo& call, Reason reason, const void* send,
                      void* recv, const void* inPlaceMarker,
                      const std::function<int(const void*, void*)>& pmpi, bool* handled);

}  // namespace gfshim::hooks
