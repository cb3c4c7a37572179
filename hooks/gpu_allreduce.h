// Blocking allreduces whose buffers may be in GPU memory (DESIGN.md, "GPU buffers"): the route is
// agreed where it must be (engine/gpu_route.h), then the call runs through NCCL (the plugin),
// through the staging pipeline around the host algorithm (engine/staged_allreduce.h), or on the
// host directly. Calls the policy passes through are staged around the PMPI call, so an MPI
// without CUDA support never sees a device pointer unless the user asked for that.
#pragma once

#include <array>
#include <cstdint>

#include "cuda/cuda_driver.h"
#include "engine/comm_registry.h"
#include "engine/gpu_route.h"
#include "engine/policy.h"
#include "engine/staged_allreduce.h"
#include "hooks/runtime.h"

namespace gfshim::hooks {

// This rank's side of an engine call's GPU route (local): where its buffers are and, on a
// communicator where some rank has the CUDA driver (state.gpu.driverOnSomeRank), its vote
// (engine/gpu_route.h), which every rank must agree on before the call runs.
struct GpuBallot {
  BufferPlacements at;
  bool voting = false;               // the route is agreed per call on this communicator
  std::array<int32_t, 3> vote{};     // encodeGpuVote of this rank
  bool agreed = false;               // `minimum` holds the agreed vote already
  std::array<int32_t, 3> minimum{};  // the element-wise MIN of every rank's vote
};
GpuBallot gpuBallotFor(const Runtime& rt, const CommState& state, const CallInfo& call,
                       const void* send, const void* recv);

// Runs an engine call (plan decided, state set up). `hostReduce` runs the host plan on host
// buffers (one block of the call). A ballot that is voting and not yet agreed is agreed here
// (one small allreduce; the blocking hook folds it into its argument check instead). *route says
// what happened; kPassthrough means nothing ran and the caller hands the call to the MPI. Errors
// after the agreement are errors of the call.
Status runPlacedAllreduce(Runtime& rt, CommState& state, const CallInfo& call, const Plan& plan,
                          const void* send, void* recv, const BlockReduce& hostReduce,
                          const GpuBallot& ballot, GpuRoute* route);

// Whether a pass-through call for `reason` could be staged around the MPI call: a valid blocking
// call of a predefined datatype, or a nonblocking one on a single-rank communicator (staged as a
// blocking call: no peer is waited for), in a process that has the CUDA driver loaded. Inline:
// every tiny pass-through asks (~20 ns in a process without the driver, see
// CudaDriver::inProcess).
inline bool mayStagePassthrough(const CallInfo& call, Reason reason) {
  const bool stageable = reason == Reason::kBelowMinBytes || reason == Reason::kAlgoNative ||
                         reason == Reason::kAutoNative || reason == Reason::kSingleRank ||
                         reason == Reason::kParamsDisagree;
  return stageable && call.dtype && (!call.nonblocking || reason == Reason::kSingleRank) &&
         call.count > 0 && CudaDriver::inProcess() != nullptr;
}

// A call mayStagePassthrough accepted: when one of its buffers is device memory and
// GFSHIM_GPU_STAGING allows it, copies the buffers to host memory, calls `pmpi(context, send,
// recv)` with host pointers (MPI_IN_PLACE kept as `inPlaceMarker`), copies the result back, sets
// *handled and returns the MPI's code. Otherwise *handled is false and nothing ran. Every rank
// makes the same PMPI call either way, so no agreement is needed; a failed copy still makes it
// (with zeros) and comes back in *copyError, for the caller to report as the call's error.
// Erroneous calls, user ops and derived datatypes never get here: they go to the MPI untouched.
using PmpiCall = int (*)(const void* context, const void* send, void* recv);
int stagedPassthrough(Runtime& rt, const CallInfo& call, const void* send, void* recv,
                      const void* inPlaceMarker, PmpiCall pmpi, const void* context, bool* handled,
                      Status* copyError);

}  // namespace gfshim::hooks
