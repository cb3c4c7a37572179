// Pass-through calls whose buffers may be in GPU memory (DESIGN.md, "GPU buffers"): staged around
// the MPI call, so an MPI without CUDA support never sees a device pointer unless the user asked
// for that. (Calls the engine runs choose their GPU route in mpi/engine.h.)
#pragma once

#include "engine/policy.h"
#include "gpu/cuda_driver.h"
#include "hooks/runtime.h"

namespace gfshim::hooks {

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
