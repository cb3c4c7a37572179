// Policy: which path an allreduce takes, as a pure function of the call, the agreed settings and
// the communicator's facts. Every Plan carries a static reason string that the logs, the stats
// report and the tests show.
//
// Cross-rank consistency: a Plan may depend only on what MPI requires to match on every rank
// (count, datatype, op, communicator, call order) and on settings all ranks have agreed
// (CommFacts::paramsAgree comes from the agreement allreduce at MPI_Init). Rank-local facts that
// could differ (buffer addresses, MPI_IN_PLACE, aliasing) only ever lead to a passthrough, and
// only for erroneous calls, where the MPI itself reports the error. So either every rank takes
// the engine path with the same algorithm, or every rank passes the call to the MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/types.h"
#include "config/config.h"
#include "engine/cost_model.h"
#include "topo/topology.h"

namespace gfshim {

enum class Route : uint8_t { kEngine, kPassthrough };
enum class Algo : uint8_t { kNone, kRing, kTorus2d, kChain, kHierarchical };

enum class Reason : uint8_t {
  // engine
  kRingForced,
  kAutoRing,
  kAutoTorus,
  kFused,
  kTorusOnNodes,
  kTorusOnForcedDims,
  kRingTorusDimsMismatch,
  kRingTorusHeterogeneous,
  kRingTorusDegenerate,
  kAutoHierarchical,
  kHierarchicalOnNodes,
  kHierarchicalOnForcedDims,
  kRingHierarchicalDimsMismatch,
  kRingHierarchicalHeterogeneous,
  kRingHierarchicalDegenerate,
  kRingHierarchicalLossy,
  kReproducibleChain,
  // passthrough
  kDisabled,
  kInvalidComm,
  kParamsDisagree,
  kFusionOff,
  kFusionUnavailable,
  kFusionOversubscribed,
  kFusionNotPrepared,
  kInvalidCount,
  kEmpty,
  kUnsupportedDatatype,
  kUserOp,
  kOpNotAllowed,
  kNullBuffer,
  kOverlappingBuffers,
  kBelowMinBytes,
  kBelowFusionMin,
  kAloneNativePredicted,
  kAlgoNative,
  kAutoNative,
  kInterComm,
  kSpansWorlds,
  kSingleRank,
  kGpuNoPath,
  kCount
};
constexpr int kReasonCount = static_cast<int>(Reason::kCount);
const char* reasonText(Reason reason);
bool isEngineReason(Reason reason);

// An allreduce call in plain C++ terms (built by the hook from the MPI arguments).
struct CallInfo {
  int64_t count = 0;           // elements; negative counts are erroneous calls
  std::optional<DType> dtype;  // empty: not a predefined datatype the engine reduces
  std::optional<RedOp> op;     // empty: user-defined (or unknown) op
  bool inPlace = false;        // sendbuf == MPI_IN_PLACE
  uintptr_t sendAddress = 0;   // as integers, so the policy can recognise erroneous calls (null
  uintptr_t recvAddress = 0;   // buffers, overlapping ranges) only when it gets that far
  bool nonblocking = false;    // MPI_Iallreduce
  bool nullComm = false;       // MPI_COMM_NULL (erroneous)

  // count x extent (the pair types' padding included: the bytes the engine moves)
  uint64_t bytes() const {
    return dtype && count > 0 ? static_cast<uint64_t>(count) * dtypeBytes(*dtype) : 0;
  }
};

struct CommFacts {
  int size = 1;
  int rank = 0;
  bool interComm = false;
  bool spansWorlds = false;  // holds ranks outside this process's MPI_COMM_WORLD
  bool paramsAgree = true;   // plan-relevant parameters are identical on every rank
  // Node layout, known after the communicator's collective setup (first engine call):
  int nodes = 0;         // distinct shared-memory nodes
  int ranksPerNode = 0;  // 0 when nodes hold different numbers of ranks
  LinkCost intraLink;    // agreed link figures for the cost model (src/topo/topology.h)
  LinkCost interLink;
  double ranksPerCpu = 0;  // the most on any node or shared host; above 1: oversubscribed (agreed)
  double rendezvousSeconds = kRendezvousSeconds;        // GFSHIM_RENDEZVOUS_US (agreed)
  double reduceBytesPerSecond = kReduceBytesPerSecond;  // GFSHIM_REDUCE_GBPS (agreed)
};

// The cost model's predictions behind a GFSHIM_ALGO=auto choice (seconds; negative: the
// algorithm was not a candidate). Native is modelled as recursive doubling, the latency-optimal
// algorithm MPIs use for the sizes where they beat a ring.
struct CostEstimate {
  double ringSeconds = -1;
  double torusSeconds = -1;
  double hierarchicalSeconds = -1;
  double nativeSeconds = -1;
};

// The lossy modes a call runs with (opt-in, float SUM only; see lossyModesFor).
struct LossyModes {
  WireCodec codec = WireCodec::kNone;  // 16-bit values on the wire
  bool sparse = false;                 // coarse-grained sparse communication (CSC)
  // Under momentum correction, a call below GFSHIM_COMPRESS_MIN_BYTES: it goes through its CSC
  // entry's momentum state (sparse is set) but always runs dense, so what it hands back is exact
  // momentum SGD's update (lossyModesFor).
  bool denseMomentum = false;
  bool any() const { return codec != WireCodec::kNone || sparse; }
};

struct Plan {
  Route route = Route::kPassthrough;
  Algo algo = Algo::kNone;
  Reason reason = Reason::kDisabled;
  uint64_t segmentBytes = 0;
  // torus2d and hierarchical: the parts whose phases overlap (algo/torus_allreduce.h,
  // algo/hierarchical_allreduce.h); 1: one after the other.
  size_t torusPieces = 1;
  // torus2d: how the column pass reduces (GFSHIM_TORUS_COLUMN; lossy plans keep the ring).
  TorusColumn torusColumn = TorusColumn::kRing;
  CostEstimate estimate;  // filled by chooseAlgorithm under GFSHIM_ALGO=auto
  LossyModes lossy;       // set by chooseAlgorithm for engine plans
};

// Lazy fusion: operations of at least this many bytes are reduced alone, in place (the cost
// model's fusionAloneBytes on the communicator's agreed facts, so every rank cuts alike).
uint64_t fusionAloneBytesOn(const CommFacts& comm);
// Fusion only where it pays: an MPI_Iallreduce below this many bytes goes to the MPI's own
// MPI_Iallreduce where it may (mayGoToNativeIallreduce), since fused alone it is predicted slower
// (the cost model's fusedAloneBeatsNativeBytes on the agreed facts; high where a node runs more
// ranks than it has CPUs).
uint64_t fusedAloneBeatsNativeBytesOn(const CommFacts& comm);
// Whether an MPI_Iallreduce may go to the MPI's own rather than be fused: the MPI's nonblocking
// collectives may run beside the shim's progress (Settings::nativeIallreduceBesideFusion), and
// the reproducible mode does not take it (the MPI's algorithm sums in another order than a fused
// bucket holding the same call), and the call has no lossy mode (lossyModesFor; the MPI's own
// algorithm cannot compress, nor keep a momentum state).
bool mayGoToNativeIallreduce(const CallInfo& call, const Settings& settings);

// The small calls that go to the MPI's own whatever the communicator: a blocking call below
// GFSHIM_MIN_BYTES, and an MPI_Iallreduce below GFSHIM_FUSION_MIN_BYTES where it may go to the
// MPI's own (mayGoToNativeIallreduce), of a predefined datatype and op the engine reduces. The
// bounds depend on the settings only, which are fixed once MPI_Init has agreed them: the hook
// remembers smallCallCountLimit per datatype, op and variant and answers the common case of tiny
// calls from it before anything else (a few compares), and planCall asks the same rule, so both
// give one answer.
struct SmallCallRule {
  uint64_t blockingBelowBytes = 0;     // 0: no blocking call is small
  uint64_t nonblockingBelowBytes = 0;  // 0: no MPI_Iallreduce is small
  bool reproducible = false;           // GFSHIM_REPRODUCIBLE: floating-point calls are never small
  bool momentumCorrection = false;     // momentumTakesEveryFloatSum: float SUM is never small
};
SmallCallRule smallCallRule(const Settings& settings);
// The datatypes whose reduction depends on the order of operands: floating point (real, complex,
// and the value of the float-int pairs). Integer, logical and bitwise reductions give the same
// bits in any order, so the reproducible mode leaves their algorithm alone.
bool reproducibleModeCovers(DType dtype);
// The smallest count of `dtype` that does not make a small call with `op` (0: no count does):
// a call is small when 0 < count < this and its communicator is not MPI_COMM_NULL. A function of
// the rule and the call's types only, so the hook may remember it per (datatype, op, variant).
int64_t smallCallCountLimit(const SmallCallRule& rule, DType dtype, RedOp op, bool nonblocking);
// kBelowMinBytes or kBelowFusionMin for a small call; empty for every other call (the rest of
// planCall decides those, erroneous ones included).
std::optional<Reason> smallCallReason(const SmallCallRule& rule, const CallInfo& call);

// Call-level decision, made before any communicator state is looked up (the cheap common case
// of small calls ends here). A kEngine result is provisional until planOnComm.
Plan planCall(const CallInfo& call, const Settings& settings);
// Completes a provisional engine plan with the communicator's facts: pass-through or engine.
Plan planOnComm(const Plan& callPlan, const CommFacts& comm);
// Picks the algorithm of an engine plan once the topology is known (after the collective setup):
// GFSHIM_ALGO=torus2d runs on nodes as rows, or on GFSHIM_TORUS_DIMS, and falls back to the ring
// with a reason where no proper grid exists; GFSHIM_ALGO=hierarchical runs on the same grid with
// the same fallbacks (and the ring under a lossy mode, which it has no compressed form of);
// GFSHIM_ALGO=auto takes the lowest time the cost model (engine/cost_model.h) predicts for
// `bytes` among ring, torus2d and hierarchical (where a grid exists) and native, and may
// therefore pass the call through; hierarchical only where it is strictly faster than both ring
// and torus2d. Only agreed facts enter, so every rank chooses the same.
// GFSHIM_REPRODUCIBLE=1: every floating-point call (reproducibleModeCovers) runs the rank-ordered
// chain (algo/chain_allreduce.h) exact, whatever GFSHIM_ALGO, the lossy settings and its size.
// A call with a lossy mode (lossyModesFor) stays on the engine: auto then chooses between ring
// and torus2d only, since neither the MPI's own algorithm nor hierarchical can compress.
Plan chooseAlgorithm(const Plan& enginePlan, const CommFacts& comm, const Settings& settings,
                     DType dtype, RedOp op, uint64_t bytes, uint64_t largestOperationBytes = 0);
// Lossy modes are opt-in and scoped: GFSHIM_COMPRESS and GFSHIM_CSC_DENSITY apply only to
// MPI_FLOAT with MPI_SUM moving at least GFSHIM_COMPRESS_MIN_BYTES (a fused bucket counts as one
// call of its total size); every other call stays exact. Agreed inputs only.
// Under momentum correction a fused bucket is judged by its largest operation
// (`largestOperationBytes`; 0: a call of its own) against momentumSparseMinBytes: the queue keeps
// the operations below it apart from the larger ones (keptApartInBuckets), so an operation is
// sparse, with its velocity, in every call or in none, whatever bucket the ranks' timing puts it
// in. Under the update output (momentumTakesEveryFloatSum) the smaller float SUM calls are
// denseMomentum.
LossyModes lossyModesFor(DType dtype, RedOp op, uint64_t bytes, const Settings& settings,
                         uint64_t largestOperationBytes = 0);
// GFSHIM_CSC_MOMENTUM with GFSHIM_CSC_DENSITY: the shim keeps the momentum of the gradients it
// defers (momentum correction).
bool momentumCorrectionOn(const Settings& settings);
// ... with address keys (GFSHIM_CSC_KEY=address): each velocity belongs to a buffer, which the
// engines claim in the process's CorrectedBuffers, and a float SUM call the shim passes through
// (not by the small-call lane, which no corrected size takes: momentumSparseMinBytes) is checked
// against them (engine/corrected_buffers.h).
bool velocitiesFollowBuffers(const Settings& settings);
// ... with GFSHIM_CSC_MOMENTUM_OUTPUT=update: the application's optimizer runs plain SGD, so the
// shim must give every gradient its momentum, every step: a tensor the MPI reduced would get
// none. Every float SUM call, of any size, blocking or fused, then takes the engine through its
// momentum state (never the small-call lane nor the MPI's own algorithm); below
// GFSHIM_COMPRESS_MIN_BYTES it runs dense (exact momentum SGD). With the gradient output the
// application's optimizer gives the small ones their momentum, so they stay as they are.
bool momentumTakesEveryFloatSum(const Settings& settings);
// Under momentum correction, the size from which a float SUM operation is sparse, blocking or
// fused alike: GFSHIM_COMPRESS_MIN_BYTES, and with the gradient output at least every size the
// small-call rule gives to the MPI (GFSHIM_MIN_BYTES for a blocking call, and so for a fused
// bucket of such operations; GFSHIM_FUSION_MIN_BYTES for an MPI_Iallreduce where it applies), so
// that no buffer the shim corrects ever goes to the MPI by its size.
uint64_t momentumSparseMinBytes(const Settings& settings);
// A fused float SUM operation below momentumSparseMinBytes under momentum correction: it never
// shares a bucket with larger ones (FusibleOp::kind).
bool keptApartInBuckets(DType dtype, RedOp op, uint64_t bytes, const Settings& settings);
// What GFSHIM_CSC_MOMENTUM asks of the application, in one sentence ("" when it is off); the init
// log and the stats report print it.
std::string momentumNote(const Settings& settings);
// Settings that do nothing as combined (GFSHIM_CSC_MOMENTUM or GFSHIM_CSC_CLIP without
// GFSHIM_CSC_DENSITY): one sentence each, warned at MPI_Init.
std::vector<std::string> lossySettingProblems(const Settings& settings);
// "ring 1.2 ms, torus2d 0.8 ms, hierarchical 0.9 ms, native 3.1 ms" (the candidates only);
// empty when not auto.
std::string formatEstimate(const CostEstimate& estimate);

}  // namespace gfshim
