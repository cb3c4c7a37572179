// Lossy float SUM allreduce: the opt-in modes of engine/policy.h (LossyModes) on the engine's ring
// or 2D torus, for a blocking call or a fused bucket. MPI-free, so the threads-as-ranks tests run
// exactly this code.
//
//   shadow?   every GFSHIM_SHADOW_EVERY-th lossy call first computes the exact result into
//             scratch (the plain ring/torus), to report the relative L2 error afterwards
//   sparse?   coarse-grained sparse communication (compress/csc.h): agree dense or sparse, norms
//             (exact), selected chunks through the dense step below, residuals kept per buffer
//   dense     codec none: the exact ring/torus; fp16/bf16: the compressed ring/torus
//             (algo/compressed_ring.h), optionally prescaled by 1/p and multiplied back by p
//   overflow  a compressed result holding Inf or NaN is redone exactly from the input. Every rank
//             holds the same result bits, so every rank decides alike; an input with Inf/NaN
//             makes the exact result non-finite too, so nothing is lost by the redo.
//
// The sparse and the dense/overflow control flow are not written here: they are the shared
// drivers runCscSteps (compress/csc_steps.h, through cscAllreduce) and runHalfWireSteps
// (compress/half_wire_steps.h), which the NCCL plugin runs too. This file supplies their
// primitives on the engine (the ring/torus over the transport) and the residual bookkeeping.
//
// Residuals: one per user buffer, keyed by (address, count) in the communicator's LossyState
// (the store dies with the communicator). A fused bucket names one buffer per operation: their
// residuals are gathered into one bucket residual for the call and scattered back after it, so
// an operation keeps its residual whatever bucket it lands in next time.
//
// Cost on top of the algorithm: an in-place compressed call copies its input once (for the
// overflow redo); the overflow check reads the result once; CSC as in compress/csc.h plus one
// small agreement (dense or sparse) per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algo/torus_grid.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "compress/csc.h"
#include "config/config.h"
#include "engine/policy.h"
#include "engine/stats.h"
#include "transport/transport.h"

namespace gfshim {

// Per communicator (the blocking path's, and each fusion queue's own).
struct LossyState {
  explicit LossyState(uint64_t maxResidualBytes) : residuals(maxResidualBytes) {}
  CscResidualStore residuals;
  CscScratch csc;
  CscResidual bucketResidual;  // a fused bucket's operations' residuals, gathered
  Workspace inputCopy;         // an in-place compressed call's input, for the overflow redo
  Workspace exact;             // shadow mode's exact result
  uint64_t calls = 0;          // lossy calls so far: shadow mode's clock, the same on all ranks
  bool capWarned = false;
};

// A user buffer whose residual the call uses: its address and element count.
struct ResidualKey {
  uintptr_t address = 0;
  size_t count = 0;
};

// Where the call runs. `agreeAny` is a logical OR over the communicator's ranks (a tiny
// collective; the engine uses PMPI_Allreduce on its private communicator).
struct LossyTarget {
  Transport& transport;
  Workspace& workspace;
  const TorusGrid* grid;  // required for Algo::kTorus2d
  std::function<Status(bool mine, bool* any)> agreeAny;
};

// recv = SUM over ranks of send (count floats) with plan.lossy's modes on plan.algo. `keys`
// partition the buffer in order (one key for a call, one per operation for a fused bucket);
// send == recv for MPI_IN_PLACE. Fills *record for the stats.
Status runLossyAllreduce(const Plan& plan, const Settings& settings, size_t count,
                         const float* send, float* recv, const std::vector<ResidualKey>& keys,
                         const LossyTarget& target, LossyState& state, LossyRecord* record);

// Relative L2 error of `got` against `exact` (0 when both are all zero).
double relativeL2Error(const float* got, const float* exact, size_t count);

}  // namespace gfshim
