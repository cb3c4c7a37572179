// Lossy float SUM allreduce: the opt-in modes of engine/policy.h (LossyModes) on the engine's ring
// or 2D torus, for a blocking call or a fused bucket. MPI-free, so the threads-as-ranks tests run
// exactly this code.
//
//   shadow?   every GFSHIM_SHADOW_EVERY-th lossy call first computes the exact result into
//             scratch (the plain ring/torus), to report the relative L2 error afterwards
//   clip?     GFSHIM_CSC_CLIP (sparse calls only): each operation's input scaled down to an L2
//             norm of at most clip / sqrt(ranks) on this rank, into scratch (DGC's local
//             gradient clipping; ranks may scale differently, the sum is still one sum)
//   sparse?   coarse-grained sparse communication (compress/csc.h): agree dense or sparse, norms
//             (exact), selected chunks through the dense step below, residuals kept per buffer,
//             with GFSHIM_CSC_MOMENTUM their velocities too (momentum correction)
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
// Momentum correction's gradient output hands back D - m * D_prev, with D_prev what the entry's
// last call delivered: identical on every rank only if every rank's entries last delivered in the
// same call. Each entry is stamped with (lossy call number, its place in the call), and every
// call with that output first agrees that all ranks' stamps are equal; where they are not (a rank
// reduced another buffer, or a new one, for this gradient, or has no entry for it) every rank
// forgets D_prev, and the shim says so once.
//
// Residuals: one per user buffer, keyed by (address, count) in the communicator's LossyState
// (or by (place in the step, count) with GFSHIM_CSC_KEY=position)
// (the store dies with the communicator). A fused bucket names one buffer per operation: their
// residuals (and velocities, and what was delivered) are gathered into one bucket residual for
// the call and scattered back after it, so an operation keeps its state whatever bucket it lands
// in next time.
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
  explicit LossyState(const Settings& settings);
  ~LossyState();
  LossyState(const LossyState&) = delete;
  LossyState& operator=(const LossyState&) = delete;
  CscResidualStore residuals;
  // Momentum correction with address keys: the velocities are claimed in the process's
  // CorrectedBuffers (engine/corrected_buffers.h), so that a buffer two engines correct is seen.
  bool claimsVelocities = false;
  CscScratch csc;
  CscResidual bucketResidual;  // a fused bucket's operations' residuals, gathered
  Workspace inputCopy;         // an in-place compressed call's input, for the overflow redo
  Workspace exact;             // shadow mode's exact result
  Workspace clipped;           // the input of a sparse call scaled by GFSHIM_CSC_CLIP
  uint64_t calls = 0;          // lossy calls so far, the same on all ranks: shadow mode's clock
                               // and the stamps of what entries delivered
  bool deliveredWarned = false;
  bool clipWarned = false;
  bool capWarned = false;
};

// A user buffer whose residual the call uses: its address (or its place in the step,
// engine/step_positions.h; 0: none, the call runs dense) and element count.
struct ResidualKey {
  uintptr_t address = 0;
  size_t count = 0;
};

// Where the call runs. `agreeAny` is a logical OR over the communicator's ranks, `agreeEqual`
// whether every rank passed the same value (tiny collectives; the engine uses PMPI_Allreduce on
// its private communicator).
struct LossyTarget {
  Transport& transport;
  Workspace& workspace;
  const TorusGrid* grid;  // required for Algo::kTorus2d
  std::function<Status(bool mine, bool* any)> agreeAny;
  std::function<Status(uint64_t mine, bool* equal)> agreeEqual;
};

// recv = SUM over ranks of send (count floats) with plan.lossy's modes on plan.algo. `keys`
// partition the buffer in order (one key for a call, one per operation for a fused bucket);
// send == recv for MPI_IN_PLACE. Fills *record for the stats.
Status runLossyAllreduce(const Plan& plan, const Settings& settings, size_t count,
                         const float* send, float* recv, const std::vector<ResidualKey>& keys,
                         const LossyTarget& target, LossyState& state, LossyRecord* record);

// The CSC parameters of GFSHIM_CSC_* (density, chunk, warm-up, momentum and its output).
CscParams cscParamsOf(const Settings& settings);

// DGC's local clipping: the factor that brings `values` to an L2 norm of at most `limit` (1 when
// it is within, or when limit is 0).
float clipScale(const float* values, size_t count, double limit);

// Relative L2 error of `got` against `exact` (0 when both are all zero).
double relativeL2Error(const float* got, const float* exact, size_t count);

}  // namespace gfshim
