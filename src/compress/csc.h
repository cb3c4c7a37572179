// Coarse-grained sparse communication (CSC, as in GradientFlow): a float SUM allreduce that
// sends only the most important chunks of the buffer and keeps the rest in a local residual.
//
// Terms: the buffer of `count` floats is cut into *chunks* of `chunkElements` elements (the last
// one may be short); a chunk is the unit of selection. The *residual* is what this rank has not
// yet delivered: one float per element, kept per (communicator, buffer address, count) across
// calls. `g = send + residual` is the gradient this call could deliver.
//
// One call (after the warm-up):
//
//   1. residual += send; norms[c] = sum |residual| over chunk c       one pass over N elements
//   2. allreduceNorms(norms)                exact float sum: identical bits on every rank
//   3. select the top k = ceil(density * chunks) chunks by (norm descending, NaN first, index
//      ascending): a strict total order on identical input, so every rank selects the same set
//   4. pack the selected chunks of the residual (= g) contiguously
//   5. allreduceValues(packed)              the ordinary dense SUM, which may be lossy (fp16)
//   6. recv: selected chunks get the sum, every other element 0; residual of the selected
//      chunks is cleared, the rest keeps g for a later call
//
// A NaN norm (some element of g is NaN on some rank) ranks above every number, Inf included, so
// the chunk is delivered at once instead of poisoning the residual forever. Conservation: the
// sum over calls of what recv received plus the residuals left on all ranks equals the sum of
// every input, up to float rounding (and up to what a lossy allreduceValues loses).
//
// The first `warmupCalls` calls on an entry are dense: send is allreduced whole, the residual
// stays zero. With no entry (the store is full, or the caller does not use one) a call is dense.
// Entries follow each rank's own buffer addresses, so their warm-up counts and the cap can
// differ between ranks: every call first agrees (CscDense::agreeDense, a logical OR) whether any
// rank needs it dense, and then all run it dense or all sparse. The control flow of a call is
// compress/csc_steps.h's runCscSteps, which the NCCL plugin runs too over device memory;
// cscAllreduce below supplies its host-memory primitives.
//
// Momentum correction (DGC, Lin et al., ICLR 2018; CscParams::momentum = m > 0). A residual
// deferred before the optimizer's momentum is amplified by it when it is finally delivered, so
// the entry also keeps a velocity u and the residual becomes DGC's accumulation v:
//
//   1'. u = m u + send; v = (1 - d) v + u; norms[c] = sum |v| over chunk c
//   6'. as 6, and u = 0 at the selected chunks too (momentum factor masking)
//   dense calls with an entry: u = m u + send; v = (1 - d) v + u; v whole to recv; v = 0
//
// The decay d (CscParams::momentumDecay) is 0 in DGC: v then holds every velocity since the chunk
// was last sent, and a chunk that waited k calls delivers them all at once (about k / (1 - m)
// gradients for a steady one, against 1 a call while it is sent every call). With d > 0 the held
// part shrinks each call and a waiting chunk delivers mostly its last velocities; what decayed is
// never applied (lossy beyond DGC, opt-in).
//
// The sum D over ranks of what is sent is the momentum-corrected update, to be applied by plain
// SGD (CscMomentumOutput::kUpdate). For an application that keeps its own momentum-SGD optimizer
// with the same m (kGradient), recv = D - m * D_prev instead, where D_prev is the previous call's
// D, kept per entry: the optimizer's velocity then equals D at every step (velocity = m D_prev
// + D - m D_prev), so it applies DGC's update; a dense call without momentum state hands back the
// plain sum, which the optimizer's own momentum turns into momentum SGD.
//
// Preconditions: identical (count, params) on all ranks; send and recv the same pointer (in
// place) or disjoint; the dense callbacks are collective and give every rank the same bits.
//
// Cost on the wire per rank for a ring allreduceValues over p ranks:
//   2(p-1)/p * N * density * 4 bytes      (the packed values; rounded up to whole chunks)
//   + the norm allreduce of ceil(N / chunkElements) floats.
// Local cost: one read of send and read+write of the residual (step 1), the selection in average
// O(chunks), and reads/writes of the selected fraction (steps 4, 6) plus a write of recv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "algo/workspace.h"
#include "common/status.h"
#include "compress/csc_residual_book.h"
#include "config/config.h"

namespace gfshim {

// 4096 floats = 16 KiB: the norm vector is 1/4096 of the data (its allreduce is latency, not
// bandwidth), a 64M-element buffer still has 16K chunks to choose from, and each chunk is
// packed with one memcpy long enough to run at copy bandwidth.
constexpr size_t kCscDefaultChunkElements = 4096;

struct CscParams {
  double density = 0.01;  // fraction of chunks sent per call, (0, 1]
  size_t chunkElements = kCscDefaultChunkElements;
  int64_t warmupCalls = 0;  // dense calls per residual entry before sparsity
  float momentum = 0;       // momentum correction (see above); 0 = off, else in (0, 1)
  float momentumDecay = 0;  // momentum correction: d in [0, 1], v = (1 - d) v + u (see above)
  CscMomentumOutput momentumOutput = CscMomentumOutput::kUpdate;
  bool dense = false;  // run dense whatever the warm-up (a call too small to be sparse)
};

// ---- Pure building blocks --------------------------------------------------------------------

// ceil(count / chunkElements); 0 when count is 0. chunkElements must be > 0.
size_t cscChunkCount(size_t count, size_t chunkElements);
// ceil(density * chunks) clamped to [1, chunks]; 0 when chunks is 0. A product within 1e-9
// (relative) of a whole number counts as that number. A NaN density counts as 1.
size_t cscSelectedCount(size_t chunks, double density);
// Elements of chunk `chunk` (chunkElements, or fewer for the last).
size_t cscChunkLength(size_t count, size_t chunkElements, size_t chunk);

// norms[c] = sum over chunk c of |data[i]|. Summed in 16 interleaved lanes combined in a fixed
// order, so the loop vectorizes without -ffast-math and the bits do not depend on the vector
// width.
void chunkL1Norms(const float* data, size_t count, size_t chunkElements, float* norms);
// residual[i] += send[i], and norms as chunkL1Norms(residual) afterwards (the same bits), in one
// pass. `send` must not overlap `residual`.
void addAndChunkL1Norms(float* residual, const float* send, size_t count, size_t chunkElements,
                        float* norms);

// The k chunks first in the order (norm descending, NaN before any number, index ascending),
// written to `selected` sorted by ascending index. Average O(chunks); `selected`'s capacity is
// reused. chunks must fit in uint32_t.
void selectTopChunks(const float* norms, size_t chunks, size_t k, std::vector<uint32_t>* selected);

// Gathers the selected chunks of `data` (ascending indices) into `packed`; returns the number of
// elements written.
size_t cscPack(const float* data, size_t count, size_t chunkElements, const uint32_t* selected,
               size_t selectedCount, float* packed);
// Momentum correction, step 1': velocity = m * velocity + send; residual = (1 - decay) * residual
// + velocity; norms as chunkL1Norms(residual) afterwards (the same bits), in one pass. `send` must
// not overlap the others. Decay 0 adds exactly (1 * x is x).
void momentumAddAndChunkL1Norms(float* residual, float* velocity, const float* send, size_t count,
                                size_t chunkElements, float momentum, float decay, float* norms);
// The same accumulation without norms (a dense call with momentum correction).
void momentumAccumulate(float* residual, float* velocity, const float* send, size_t count,
                        float momentum, float decay);
// CscMomentumOutput::kGradient: d = recv[i]; recv[i] = d - m * delivered[i]; delivered[i] = d.
void momentumToGradient(float* recv, float* delivered, size_t count, float momentum);

// Writes `summed` (as cscPack laid it out) into the selected chunks of `recv`, 0 everywhere else;
// `summed` must not overlap `recv`. Returns the number of elements read from `summed`.
size_t cscUnpack(const float* summed, size_t count, size_t chunkElements, const uint32_t* selected,
                 size_t selectedCount, float* recv);
// Sets the selected chunks of `data` to 0.
void cscClearChunks(float* data, size_t count, size_t chunkElements, const uint32_t* selected,
                    size_t selectedCount);

// ---- Residuals ---------------------------------------------------------------------------------

// One buffer's undelivered gradient and warm-up counter; with momentum correction also its
// velocity u and, for CscMomentumOutput::kGradient, what the last call delivered.
struct CscResidual {
  std::unique_ptr<float[]> values;     // `count` floats, zero when created (v under momentum)
  std::unique_ptr<float[]> velocity;   // `count` floats or null (no momentum correction)
  std::unique_ptr<float[]> delivered;  // `count` floats or null (not kGradient)
  size_t count = 0;
  int64_t callsSeen = 0;
  // The caller's label of the call that filled `delivered` (0: none yet), so that ranks can
  // check that they hand back against the same delivery (engine/lossy_allreduce.cpp).
  uint64_t deliveredStamp = 0;
  float* data() { return values.get(); }
};

// Residuals keyed by (communicator id, buffer address, count), in host memory, with the rules of
// compress/csc_residual_book.h (which the NCCL plugin's device store follows too): a key whose
// (communicator, address) reappears with another count replaces the old entry; a new entry past
// the cap is refused. Residuals are float only, so the design's dtype in the key is implied. Not
// thread-safe: one store per communicator or a lock in the caller.
class CscResidualStore {
 public:
  // `arrays`: floats kept per element, 1 (the residual), 2 (and the velocity) or 3 (and what was
  // delivered), as cscArraysPerElement says for the params.
  explicit CscResidualStore(size_t capBytes, int arrays = 1)
      : book_(capBytes, static_cast<size_t>(arrays) * sizeof(float)), arrays_(arrays) {}

  // The entry for the key, created zeroed if absent; nullptr when a new entry would take the
  // bytes held past the cap (or allocation fails), in which case the call runs dense.
  CscResidual* findOrCreate(uint64_t commId, uintptr_t address, size_t count);
  // Drops every entry of the communicator (MPI_Comm_free).
  void dropComm(uint64_t commId);

  size_t bytesHeld() const { return book_.bytesHeld(); }
  size_t entryCount() const { return book_.entryCount(); }
  size_t capBytes() const { return book_.capBytes(); }

 private:
  using Key = std::pair<uint64_t, uintptr_t>;
  CscResidualBook<Key, CscResidual> book_;
  int arrays_;
};

// Momentum correction with CscMomentumOutput::kGradient: calls with an entry hand back
// D - m * D_prev, and entries keep what they delivered.
bool cscHandsBackGradient(const CscParams& params);
// The floats a residual entry keeps per element under `params`: 1, 2 with momentum correction, 3
// when it also hands back the optimizer's gradient.
int cscArraysPerElement(const CscParams& params);

// ---- The composed call ---------------------------------------------------------------------

// The two collectives CSC runs, supplied by the caller (PMPI ring, fake transport, ...). Both are
// SUM allreduces over all ranks and must give every rank identical bits.
class CscDense {
 public:
  virtual ~CscDense() = default;
  // Whether any rank wants this call dense (its own `wantDense`): a logical OR over ranks.
  virtual Status agreeDense(bool wantDense, bool* anyDense) = 0;
  // Exact float sum, in place.
  virtual Status allreduceNorms(float* norms, size_t chunks) = 0;
  // May be lossy (fp16 on the wire). `packed` and `summed` may be the same pointer.
  virtual Status allreduceValues(const float* packed, float* summed, size_t n) = 0;
};

// Scratch reused across calls: no allocation once the largest call has been seen.
struct CscScratch {
  Workspace norms;
  Workspace packed;
  std::vector<uint32_t> selected;  // the last sparse call's chunks, ascending
};

enum class CscMode {
  kDenseNoEntry,        // entry == nullptr
  kDenseWarmup,         // entry in its first warmupCalls calls
  kDenseAsked,          // CscParams::dense
  kDenseTooManyChunks,  // more than 2^32 - 1 chunks: chunk indices would not fit
  kDenseNoScratch,      // no memory for the sparse scratch on this rank
  kDenseByPeer,         // this rank could run sparse, another rank could not
  kSparse,
  kDeclined,  // some rank cannot run the call at all (runCscSteps): it failed on every rank
};

struct CscOutcome {
  CscMode mode = CscMode::kDenseNoEntry;
  size_t chunks = 0;          // 0 for dense calls
  size_t selectedChunks = 0;  // 0 for dense calls
  size_t elementsSent = 0;    // values through allreduceValues (count for dense calls)
  size_t normsSent = 0;       // floats through allreduceNorms
  bool momentumCorrected = false;  // momentum correction ran (the call had a residual entry)
};

// recv = CSC SUM allreduce of send (see the top of this file) in host memory: runCscSteps over
// these building blocks and `dense`'s collectives. On an error before anything was sent (invalid
// params) the entry is untouched; a rank without memory for the sparse scratch asks for a dense
// call; on an error from the dense callbacks the entry is reset (residual zero, warm-up
// restarts), since the ranks can no longer agree on what was delivered.
Status cscAllreduce(const CscParams& params, CscResidual* entry, const float* send, float* recv,
                    size_t count, CscDense& dense, CscScratch& scratch, CscOutcome* outcome);

}  // namespace gfshim
