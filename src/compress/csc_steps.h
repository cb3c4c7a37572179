// One CSC call's control flow (compress/csc.h explains the algorithm), written once for both
// places it runs: host memory with the engine's collectives (cscAllreduce in compress/csc.cpp,
// which engine/lossy_allreduce.cpp calls) and the NCCL plugin's device memory, kernels and NCCL
// on the group's stream (cuda/nccl_plugin.cpp). runCscSteps makes every decision and fills the
// CscOutcome; a CscBackend supplies the primitives and owns the buffers (the call's send and
// recv, its residual, the scratch). Includes nothing of MPI or CUDA.
//
//   check     params (density, chunk size, momentum): an error sends nothing
//   local     everything that can fail on one rank alone, before the first collective:
//               reserveDense    the dense form's scratch; out of memory -> cannot run
//               findResidual    the entry; none (cap, allocation)       -> dense
//               warm-up not over, more than 2^32 - 1 chunks             -> dense
//               reserveSparse   the sparse form's scratch; out of memory -> dense
//             otherwise sparse
//   agree     the largest CscReadiness over the ranks: one rank that cannot run sparse makes the
//             call dense everywhere, one that cannot run it at all makes it decline everywhere
//   declined  nothing more is sent: every rank's call fails alike (kOutOfMemory) and the caller
//             may run it another way
//   dense     allreduceDense: send whole into recv; the residual stays as it is. With momentum
//             correction and an entry, allreduceDenseCorrected: the velocity and residual take
//             send in, the residual goes whole into recv and is cleared
//   sparse    addAndNorms, allreduceNorms, selectTop, pack, allreducePacked, unpackAndClear
//             (with momentum correction they update and mask the velocity too)
//   output    momentum correction with CscMomentumOutput::kGradient and an entry:
//             momentumToGradient
//   finish    the backend's queued work completes; the entry counts the call
//
// A failure after the agreement resets the entry (counter 0, values by resetResidual): the ranks
// no longer agree on what was delivered. A failure before it leaves the entry untouched.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "compress/csc.h"

namespace gfshim {

// How a rank can run a CSC call; agreed as the largest over the ranks (a MAX of the int value).
enum class CscReadiness : int { kSparse = 0, kDense = 1, kCannotRun = 2 };

// The sizes of one call, computed by runCscSteps and handed to every primitive.
struct CscShape {
  size_t count = 0;          // elements of send, recv and the residual
  size_t chunkElements = 0;  // > 0
  size_t chunks = 0;         // cscChunkCount(count, chunkElements), < 2^32 when sparse
  size_t selected = 0;       // chunks sent by a sparse call, cscSelectedCount
  size_t maxPacked = 0;      // the packed values at most: min(count, selected * chunkElements)
  float momentum = 0;        // CscParams::momentum where the call has a residual entry, else 0
  float momentumDecay = 0;   // CscParams::momentumDecay
};

// The primitives of one call. Each step's inputs are the earlier steps' outputs, kept by the
// backend (norms, selection, packed values); collective steps are called in the same order on
// every rank.
class CscBackend {
 public:
  virtual ~CscBackend() = default;

  // ---- Local, before the agreement: an error other than kOutOfMemory ends the call there ----
  // Reserves what allreduceDense needs; kOutOfMemory: this rank cannot run the call at all.
  virtual Status reserveDense(size_t count) = 0;
  // *callsSeen = the call counter of the residual entry of `count` elements, or null where the
  // call has none (it runs dense).
  virtual Status findResidual(size_t count, int64_t** callsSeen) = 0;
  // Reserves the sparse steps' scratch; kOutOfMemory: this rank asks for a dense call.
  virtual Status reserveSparse(const CscShape& shape) = 0;

  // ---- Collective ----
  // *agreed = the largest `mine` over the ranks; the call's first collective.
  virtual Status agree(CscReadiness mine, CscReadiness* agreed) = 0;
  // recv = the dense SUM of send over the ranks (the dense step, possibly 16 bits on the wire).
  virtual Status allreduceDense(size_t count) = 0;
  // Momentum correction with an entry: velocity and residual take send in (momentumAccumulate),
  // then recv = the residual summed over the ranks, and the residual = 0.
  virtual Status allreduceDenseCorrected(const CscShape& shape) = 0;
  // residual += send, and the residual's chunk L1 norms (addAndChunkL1Norms; with
  // shape.momentum, momentumAddAndChunkL1Norms). Send is consumed here: recv may alias it from
  // now on.
  virtual Status addAndNorms(const CscShape& shape) = 0;
  // The norms summed over the ranks exactly: identical bits on every rank.
  virtual Status allreduceNorms(const CscShape& shape) = 0;
  // The shape.selected chunks first in selectTopChunks' order of the summed norms.
  virtual Status selectTop(const CscShape& shape) = 0;
  // The selected chunks of the residual, packed as cscPack lays them out; *packedCount = the
  // elements allreducePacked sums (the packed length, or maxPacked with a zeroed end).
  virtual Status pack(const CscShape& shape, size_t* packedCount) = 0;
  // The packed values summed over the ranks (the dense step, possibly 16 bits on the wire).
  virtual Status allreducePacked(size_t packedCount) = 0;
  // recv = the sums in the selected chunks, 0 elsewhere (cscUnpack); the selected chunks of the
  // residual = 0 (cscClearChunks), and of the velocity with shape.momentum (factor masking).
  virtual Status unpackAndClear(const CscShape& shape) = 0;
  // recv = what the optimizer's own momentum turns into the delivered update (momentumToGradient).
  virtual Status momentumToGradient(const CscShape& shape) = 0;
  // The call's work is complete (a device backend waits for its stream); `sparse` as agreed.
  virtual Status finish(bool sparse) = 0;
  // After a failure past the agreement: the residual's values to zero, as far as they matter.
  virtual void resetResidual() = 0;
};

// Runs one CSC SUM allreduce of `count` floats over `backend` (see the top of this file);
// *outcome (may be null) says how it ran.
Status runCscSteps(const CscParams& params, size_t count, CscBackend& backend, CscOutcome* outcome);

}  // namespace gfshim
