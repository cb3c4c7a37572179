#include "engine/policy.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "engine/cost_model.h"

namespace gfshim {
namespace {

bool hasNullBuffer(const CallInfo& call) {
  return call.recvAddress == 0 || (!call.inPlace && call.sendAddress == 0);
}

bool buffersOverlap(const CallInfo& call) {
  const uint64_t bytes = call.bytes();
  return !call.inPlace && call.sendAddress < call.recvAddress + bytes &&
         call.recvAddress < call.sendAddress + bytes;
}

Plan passthrough(Reason reason) {
  Plan plan;
  plan.route = Route::kPassthrough;
  plan.reason = reason;
  return plan;
}

}  // namespace

const char* reasonText(Reason reason) {
  switch (reason) {
    case Reason::kRingForced:
      return "ring (GFSHIM_ALGO=ring)";
    case Reason::kAutoRing:
      return "ring (auto: lowest predicted time)";
    case Reason::kAutoTorus:
      return "torus2d (auto: lowest predicted time)";
    case Reason::kFused:
      return "MPI_Iallreduce fused: buckets reduced by the engine";
    case Reason::kTorusOnNodes:
      return "torus2d (GFSHIM_ALGO=torus2d, rows are nodes)";
    case Reason::kTorusOnForcedDims:
      return "torus2d (grid from GFSHIM_TORUS_DIMS)";
    case Reason::kRingTorusDimsMismatch:
      return "ring (GFSHIM_TORUS_DIMS does not match the communicator size)";
    case Reason::kRingTorusHeterogeneous:
      return "ring (torus2d asked, but nodes hold different numbers of ranks)";
    case Reason::kRingTorusDegenerate:
      return "ring (torus2d asked, but one node or one rank per node: a single ring)";
    case Reason::kAutoHierarchical:
      return "hierarchical (auto: lowest predicted time)";
    case Reason::kHierarchicalOnNodes:
      return "hierarchical (GFSHIM_ALGO=hierarchical, leaders of nodes)";
    case Reason::kHierarchicalOnForcedDims:
      return "hierarchical (grid from GFSHIM_TORUS_DIMS)";
    case Reason::kRingHierarchicalDimsMismatch:
      return "ring (hierarchical asked, but GFSHIM_TORUS_DIMS does not match the communicator "
             "size)";
    case Reason::kRingHierarchicalHeterogeneous:
      return "ring (hierarchical asked, but nodes hold different numbers of ranks)";
    case Reason::kRingHierarchicalDegenerate:
      return "ring (hierarchical asked, but one node or one rank per node: a single ring)";
    case Reason::kRingHierarchicalLossy:
      return "ring (hierarchical asked, but it has no compressed form for the lossy mode)";
    case Reason::kReproducibleChain:
      return "chain (GFSHIM_REPRODUCIBLE=1: every element summed in rank order)";
    case Reason::kInvalidComm:
      return "MPI_COMM_NULL or an invalid communicator (erroneous; the MPI reports it)";
    case Reason::kDisabled:
      return "GFSHIM_ENABLE=0";
    case Reason::kParamsDisagree:
      return "GFSHIM parameters differ across ranks";
    case Reason::kFusionOff:
      return "MPI_Iallreduce with GFSHIM_FUSION=0";
    case Reason::kFusionUnavailable:
      return "MPI_Iallreduce: no MPI_THREAD_MULTIPLE for the fusion thread";
    case Reason::kFusionOversubscribed:
      return "MPI_Iallreduce: a node has more ranks than CPUs, no room for a fusion thread";
    case Reason::kFusionNotPrepared:
      return "MPI_Iallreduce on a communicator not made by a hooked call (fused after its first "
             "engine MPI_Allreduce)";
    case Reason::kInvalidCount:
      return "negative count (erroneous; the MPI reports it)";
    case Reason::kEmpty:
      return "count 0";
    case Reason::kUnsupportedDatatype:
      return "datatype not reduced by the engine (derived or not predefined for reductions)";
    case Reason::kUserOp:
      return "user-defined op";
    case Reason::kOpNotAllowed:
      return "op not defined on this datatype (erroneous; the MPI reports it)";
    case Reason::kNullBuffer:
      return "null buffer with nonzero count (erroneous; the MPI reports it)";
    case Reason::kOverlappingBuffers:
      return "send and receive buffers overlap without MPI_IN_PLACE (erroneous)";
    case Reason::kBelowMinBytes:
      return "below GFSHIM_MIN_BYTES";
    case Reason::kBelowFusionMin:
      return "MPI_Iallreduce below GFSHIM_FUSION_MIN_BYTES (the MPI's own)";
    case Reason::kAloneNativePredicted:
      return "MPI_Iallreduce the MPI's own predicted faster than fused alone (cost model)";
    case Reason::kAlgoNative:
      return "GFSHIM_ALGO=native";
    case Reason::kAutoNative:
      return "native (auto: the MPI's recursive doubling predicted fastest)";
    case Reason::kInterComm:
      return "intercommunicator";
    case Reason::kSpansWorlds:
      return "communicator spans several MPI_COMM_WORLDs";
    case Reason::kSingleRank:
      return "communicator of one rank";
    case Reason::kGpuNoPath:
      return "GPU buffer, no NCCL and GFSHIM_GPU_STAGING=0 (the MPI must be CUDA-aware)";
    case Reason::kCount:
      break;
  }
  return "?";
}

// Engine reasons come first in the enum.
bool isEngineReason(Reason reason) { return reason <= Reason::kReproducibleChain; }

SmallCallRule smallCallRule(const Settings& settings) {
  SmallCallRule rule;
  if (!settings.enable) return rule;
  // Fusion exists for small tensors: GFSHIM_MIN_BYTES applies to blocking calls only. A small
  // nonblocking call costs less as the MPI's own than fused (one negotiation and one generalized
  // request), wherever the MPI's nonblocking collectives may run beside the shim's progress.
  rule.blockingBelowBytes = settings.minBytes;
  if (settings.fusion && settings.fusionAvailable && settings.nativeIallreduceBesideFusion) {
    rule.nonblockingBelowBytes = settings.fusionMinBytes;
  }
  rule.reproducible = settings.reproducible;
  rule.momentumCorrection = momentumTakesEveryFloatSum(settings);
  return rule;
}

int64_t smallCallCountLimit(const SmallCallRule& rule, DType dtype, RedOp op, bool nonblocking) {
  const uint64_t below = nonblocking ? rule.nonblockingBelowBytes : rule.blockingBelowBytes;
  if (below == 0 || !opAllowedOn(op, dtype)) return 0;
  // The reproducible mode takes floating-point calls of every size: the MPI's own algorithm for
  // small ones would sum in another order than the chain or a fused bucket holding the same call.
  if (rule.reproducible && reproducibleModeCovers(dtype)) return 0;
  if (rule.momentumCorrection && dtype == DType::kFloat32 && op == RedOp::kSum) return 0;
  const uint64_t elementBytes = dtypeBytes(dtype);  // count x elementBytes < below
  return static_cast<int64_t>(
      std::min<uint64_t>((below + elementBytes - 1) / elementBytes, INT64_MAX));
}

std::optional<Reason> smallCallReason(const SmallCallRule& rule, const CallInfo& call) {
  if (call.nullComm || call.count <= 0 || !call.dtype || !call.op ||
      call.count >= smallCallCountLimit(rule, *call.dtype, *call.op, call.nonblocking)) {
    return std::nullopt;
  }
  return call.nonblocking ? Reason::kBelowFusionMin : Reason::kBelowMinBytes;
}

Plan planCall(const CallInfo& call, const Settings& settings) {
  if (!settings.enable) return passthrough(Reason::kDisabled);
  if (call.nullComm) return passthrough(Reason::kInvalidComm);
  if (call.nonblocking && !settings.fusion) return passthrough(Reason::kFusionOff);
  if (call.nonblocking && !settings.fusionAvailable) {
    return passthrough(settings.fusionOversubscribed ? Reason::kFusionOversubscribed
                                                     : Reason::kFusionUnavailable);
  }
  if (call.count < 0) return passthrough(Reason::kInvalidCount);
  if (call.count == 0) return passthrough(Reason::kEmpty);
  if (!call.dtype) return passthrough(Reason::kUnsupportedDatatype);
  if (!call.op) return passthrough(Reason::kUserOp);
  if (!opAllowedOn(*call.op, *call.dtype)) return passthrough(Reason::kOpNotAllowed);
  if (const std::optional<Reason> small = smallCallReason(smallCallRule(settings), call)) {
    return passthrough(*small);
  }
  if (hasNullBuffer(call)) return passthrough(Reason::kNullBuffer);
  if (buffersOverlap(call)) return passthrough(Reason::kOverlappingBuffers);
  if (settings.algo == AlgoChoice::kNative) return passthrough(Reason::kAlgoNative);
  Plan plan;
  plan.route = Route::kEngine;
  if (call.nonblocking) {
    // Queued; each bucket's algorithm is chosen when the bucket is reduced (fusion_queue.h).
    plan.reason = Reason::kFused;
    return plan;
  }
  if (settings.algo == AlgoChoice::kTorus2d) {
    plan.algo = Algo::kTorus2d;
    plan.reason = Reason::kTorusOnNodes;  // provisional: chooseAlgorithm checks the grid
  } else if (settings.algo == AlgoChoice::kHierarchical) {
    plan.algo = Algo::kHierarchical;
    plan.reason = Reason::kHierarchicalOnNodes;  // provisional: chooseAlgorithm checks the grid
  } else {
    plan.algo = Algo::kRing;
    // provisional under auto: chooseAlgorithm consults the cost model
    plan.reason = settings.algo == AlgoChoice::kRing ? Reason::kRingForced : Reason::kAutoRing;
  }
  plan.segmentBytes = settings.segmentBytes;
  return plan;
}

Plan planOnComm(const Plan& callPlan, const CommFacts& comm) {
  if (callPlan.route == Route::kPassthrough) return callPlan;
  if (!comm.paramsAgree) return passthrough(Reason::kParamsDisagree);
  if (comm.interComm) return passthrough(Reason::kInterComm);
  if (comm.spansWorlds) return passthrough(Reason::kSpansWorlds);
  if (comm.size == 1) return passthrough(Reason::kSingleRank);
  return callPlan;
}

namespace {

// The cost model's view of the communicator: X ranks per node on Y nodes, or, when nodes hold
// different numbers of ranks, every rank on its own node (every step may cross nodes).
ClusterShape shapeOf(const CommFacts& comm) {
  ClusterShape shape;
  const bool even = comm.ranksPerNode > 0 && comm.nodes > 0;
  shape.ranksPerNode = even ? comm.ranksPerNode : 1;
  shape.nodes = even ? comm.nodes : comm.size;
  shape.intraNode = comm.intraLink;
  shape.interNode = comm.interLink;
  shape.ranksPerCpu = comm.ranksPerCpu;
  shape.rendezvousSeconds = comm.rendezvousSeconds;
  shape.reduceBytesPerSecond = comm.reduceBytesPerSecond;
  return shape;
}

}  // namespace

uint64_t fusionAloneBytesOn(const CommFacts& comm) { return fusionAloneBytes(shapeOf(comm)); }

uint64_t fusedAloneBeatsNativeBytesOn(const CommFacts& comm) {
  return fusedAloneBeatsNativeBytes(shapeOf(comm));
}

bool mayGoToNativeIallreduce(const CallInfo& call, const Settings& settings) {
  return call.nonblocking && settings.nativeIallreduceBesideFusion &&
         !(settings.reproducible && call.dtype && reproducibleModeCovers(*call.dtype)) &&
         !(call.dtype && call.op &&
           lossyModesFor(*call.dtype, *call.op, call.bytes(), settings).any());
}

namespace {

// The torus's layout for a call of `bytes` on `grid`: its pieces and column pass as the settings
// fix them (GFSHIM_TORUS_PIECES, GFSHIM_TORUS_COLUMN), the cost model choosing what they leave
// open (the faster column, ties to the ring), and the predicted time. A lossy call's compressed
// torus has ring columns only.
struct TorusLayout {
  size_t pieces = 1;
  TorusColumn column = TorusColumn::kRing;
  double seconds = 0;
};

TorusLayout chooseTorusLayout(const ClusterShape& grid, const Settings& settings, double bytes,
                              bool lossy) {
  std::vector<TorusColumn> columns;
  if (lossy || settings.torusColumn == TorusColumnChoice::kRing) {
    columns = {TorusColumn::kRing};
  } else if (settings.torusColumn == TorusColumnChoice::kHalving) {
    columns = {TorusColumn::kHalvingDoubling};
  } else if (settings.torusColumn == TorusColumnChoice::kSplit) {
    columns = {TorusColumn::kRingThenHalving};
  } else if (grid.ranksPerCpu > 1) {
    // Halving's whole halves against the ring's pipelined segments: on the emulated 4 x 2
    // cluster (8 ranks on 2 cores, TCP at 1 Gbit/s), where the model has halving ahead, a
    // blocking 4M call took 77.6 ms with halving columns and 56.5 with ring columns, and bursts
    // of ten 1M calls 1.53x native against 1.00-1.03 (bench/RESULTS.md, "Ranks a CPU");
    // halving's simulated wins were all on nodes with a CPU a rank.
    columns = {TorusColumn::kRing};
  } else {
    // Not split: simulated, it won at 384 ABCI ranks and lost at 3456 where the model has it
    // fastest (bench/RESULTS.md, "Split columns"), so auto does not take it yet.
    columns = {TorusColumn::kRing, TorusColumn::kHalvingDoubling};
  }
  TorusLayout best;
  best.seconds = -1;
  for (const TorusColumn column : columns) {
    const int64_t pieces = settings.torusPieces > 0 ? static_cast<int64_t>(settings.torusPieces)
                                                    : bestTorusPieces(grid, bytes, column);
    const double seconds = torusCost(grid, bytes, pieces, column).seconds;
    if (best.seconds < 0 || seconds < best.seconds) {
      best = TorusLayout{static_cast<size_t>(pieces), column, seconds};
    }
  }
  return best;
}

// GFSHIM_TORUS_PIECES applies to both algorithms of the grid.
size_t hierarchicalPiecesFor(const ClusterShape& grid, const Settings& settings, double bytes) {
  if (settings.torusPieces > 0) return static_cast<size_t>(settings.torusPieces);
  return static_cast<size_t>(
      bestHierarchicalPieces(grid, bytes, static_cast<double>(settings.segmentBytes)));
}

// `exactOnly`: no lossy mode, so the candidates without a compressed form (native, hierarchical)
// may run.
Plan chooseByCost(const Plan& enginePlan, const CommFacts& comm, const Settings& settings,
                  uint64_t bytes, bool exactOnly) {
  Plan plan = enginePlan;
  const double n = static_cast<double>(bytes);
  ClusterShape shape = shapeOf(comm);
  plan.estimate.ringSeconds = ringCost(shape, n).seconds;
  plan.estimate.nativeSeconds = recursiveDoublingCost(shape, n).seconds;
  const bool forcedGrid = settings.torusX > 0 && settings.torusX * settings.torusY == comm.size;
  if (forcedGrid) {
    shape.ranksPerNode = settings.torusX;
    shape.nodes = settings.torusY;
  }
  const bool grid = forcedGrid || (comm.ranksPerNode > 1 && comm.nodes > 1);
  size_t hierarchicalPieces = 1;
  if (grid) {
    const TorusLayout layout = chooseTorusLayout(shape, settings, n, !exactOnly);
    plan.torusPieces = layout.pieces;
    plan.torusColumn = layout.column;
    plan.estimate.torusSeconds = layout.seconds;
    if (exactOnly) {
      hierarchicalPieces = hierarchicalPiecesFor(shape, settings, n);
      plan.estimate.hierarchicalSeconds =
          hierarchicalCost(shape, n, static_cast<double>(settings.segmentBytes),
                           static_cast<int64_t>(hierarchicalPieces))
              .seconds;
    }
  }
  const CostEstimate& e = plan.estimate;
  auto beats = [](double seconds, double other) { return other < 0 || seconds < other; };
  if (exactOnly && e.nativeSeconds < e.ringSeconds && beats(e.nativeSeconds, e.torusSeconds) &&
      beats(e.nativeSeconds, e.hierarchicalSeconds)) {
    Plan native = passthrough(Reason::kAutoNative);
    native.estimate = e;
    return native;
  }
  if (e.hierarchicalSeconds >= 0 && e.hierarchicalSeconds < e.ringSeconds &&
      beats(e.hierarchicalSeconds, e.torusSeconds)) {
    plan.algo = Algo::kHierarchical;
    plan.reason = Reason::kAutoHierarchical;
    plan.torusPieces = hierarchicalPieces;
  } else if (e.torusSeconds >= 0 && e.torusSeconds < e.ringSeconds) {
    plan.algo = Algo::kTorus2d;
    plan.reason = Reason::kAutoTorus;
  } else {
    plan.algo = Algo::kRing;
    plan.reason = Reason::kAutoRing;
    plan.torusPieces = 1;
  }
  if (plan.algo != Algo::kTorus2d) plan.torusColumn = TorusColumn::kRing;
  return plan;
}

std::string formatSeconds(double seconds) {
  char text[32];
  if (seconds >= 1) {
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  }
  return text;
}

}  // namespace

std::string formatEstimate(const CostEstimate& estimate) {
  std::string text;
  const std::pair<const char*, double> candidates[] = {
      {"ring", estimate.ringSeconds},
      {"torus2d", estimate.torusSeconds},
      {"hierarchical", estimate.hierarchicalSeconds},
      {"native", estimate.nativeSeconds}};
  for (const auto& [name, seconds] : candidates) {
    if (seconds < 0) continue;
    text += (text.empty() ? "" : ", ") + std::string(name) + " " + formatSeconds(seconds);
  }
  return text;
}

bool momentumCorrectionOn(const Settings& settings) {
  return settings.cscDensity > 0 && settings.cscMomentum > 0;
}

bool velocitiesFollowBuffers(const Settings& settings) {
  return momentumCorrectionOn(settings) && settings.cscKey == CscKey::kAddress;
}

bool momentumTakesEveryFloatSum(const Settings& settings) {
  return momentumCorrectionOn(settings) &&
         settings.cscMomentumOutput == CscMomentumOutput::kUpdate;
}

uint64_t momentumSparseMinBytes(const Settings& settings) {
  if (momentumTakesEveryFloatSum(settings)) return settings.compressMinBytes;
  const SmallCallRule small = smallCallRule(settings);
  return std::max(
      {settings.compressMinBytes, small.blockingBelowBytes, small.nonblockingBelowBytes});
}

bool keptApartInBuckets(DType dtype, RedOp op, uint64_t bytes, const Settings& settings) {
  return momentumCorrectionOn(settings) && dtype == DType::kFloat32 && op == RedOp::kSum &&
         bytes < momentumSparseMinBytes(settings);
}

std::string momentumNote(const Settings& settings) {
  if (!momentumCorrectionOn(settings)) return "";
  char note[400];
  if (settings.cscMomentumOutput == CscMomentumOutput::kGradient) {
    std::snprintf(note, sizeof(note),
                  "momentum correction (m = %g): sparse calls hand back what the application's "
                  "momentum-SGD optimizer with momentum %g (no Nesterov, no dampening) turns into "
                  "the corrected update",
                  settings.cscMomentum, settings.cscMomentum);
  } else {
    std::snprintf(note, sizeof(note),
                  "momentum correction (m = %g): every float SUM call hands back the momentum "
                  "update (corrected where sparse); the application's optimizer must run without "
                  "momentum (plain SGD), and float sums that are not gradients (a loss) get "
                  "momentum too: reduce them as MPI_DOUBLE",
                  settings.cscMomentum);
  }
  std::string text = note;
  if (settings.cscMomentumDecay > 0) {
    std::snprintf(note, sizeof(note),
                  "; a chunk drops %g of what it holds back each call (GFSHIM_CSC_MOMENTUM_DECAY), "
                  "so part of a waiting chunk's update is never applied",
                  settings.cscMomentumDecay);
    text += note;
  }
  return text;
}

std::vector<std::string> lossySettingProblems(const Settings& settings) {
  std::vector<std::string> problems;
  if (settings.cscMomentumDecay > 0 && !(settings.cscMomentum > 0)) {
    problems.push_back("GFSHIM_CSC_MOMENTUM_DECAY does nothing without GFSHIM_CSC_MOMENTUM");
  }
  if (settings.cscStepOperations > 0 && settings.cscKey != CscKey::kPosition) {
    problems.push_back("GFSHIM_CSC_STEP_OPERATIONS does nothing without GFSHIM_CSC_KEY=position");
  }
  if (settings.cscDensity > 0) return problems;
  if (settings.cscKey == CscKey::kPosition) {
    problems.push_back("GFSHIM_CSC_KEY=position does nothing without GFSHIM_CSC_DENSITY");
  }
  if (settings.cscMomentum > 0) {
    problems.push_back("GFSHIM_CSC_MOMENTUM does nothing without GFSHIM_CSC_DENSITY");
  }
  if (settings.cscClip > 0) {
    problems.push_back("GFSHIM_CSC_CLIP does nothing without GFSHIM_CSC_DENSITY");
  }
  return problems;
}

LossyModes lossyModesFor(DType dtype, RedOp op, uint64_t bytes, const Settings& settings,
                         uint64_t largestOperationBytes) {
  LossyModes modes;
  if (dtype != DType::kFloat32 || op != RedOp::kSum) return modes;
  const bool momentum = momentumCorrectionOn(settings);
  const uint64_t judged = momentum && largestOperationBytes > 0 ? largestOperationBytes : bytes;
  if (judged >= (momentum ? momentumSparseMinBytes(settings) : settings.compressMinBytes)) {
    modes.codec = settings.compress;
    modes.sparse = settings.cscDensity > 0;
  } else if (momentumTakesEveryFloatSum(settings)) {
    modes.sparse = true;
    modes.denseMomentum = true;
  }
  return modes;
}

bool reproducibleModeCovers(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kLongDouble:
    case DType::kComplexFloat32:
    case DType::kComplexFloat64:
    case DType::kComplexLongDouble:
    case DType::kFloatInt:
    case DType::kDoubleInt:
    case DType::kLongDoubleInt:
      return true;
    default:
      return false;
  }
}

Plan chooseAlgorithm(const Plan& enginePlan, const CommFacts& comm, const Settings& settings,
                     DType dtype, RedOp op, uint64_t bytes, uint64_t largestOperationBytes) {
  if (enginePlan.route != Route::kEngine) return enginePlan;
  if (settings.reproducible && reproducibleModeCovers(dtype)) {
    Plan plan = enginePlan;
    plan.algo = Algo::kChain;
    plan.reason = Reason::kReproducibleChain;
    plan.segmentBytes = settings.segmentBytes;
    plan.lossy = LossyModes{};
    return plan;
  }
  const LossyModes lossy = lossyModesFor(dtype, op, bytes, settings, largestOperationBytes);
  Plan plan = enginePlan;
  if (settings.algo == AlgoChoice::kAuto) {
    plan = chooseByCost(enginePlan, comm, settings, bytes, !lossy.any());
    plan.lossy = plan.route == Route::kEngine ? lossy : LossyModes{};
    return plan;
  }
  plan.lossy = lossy;
  const bool torus = enginePlan.algo == Algo::kTorus2d;
  if (!torus && enginePlan.algo != Algo::kHierarchical) return plan;
  auto ring = [&plan](Reason reason) {
    plan.algo = Algo::kRing;
    plan.reason = reason;
    return plan;
  };
  if (!torus && lossy.any()) return ring(Reason::kRingHierarchicalLossy);
  ClusterShape grid = shapeOf(comm);
  if (settings.torusX > 0) {
    if (settings.torusX * settings.torusY != comm.size) {
      return ring(torus ? Reason::kRingTorusDimsMismatch : Reason::kRingHierarchicalDimsMismatch);
    }
    grid.ranksPerNode = settings.torusX;
    grid.nodes = settings.torusY;
    plan.reason = torus ? Reason::kTorusOnForcedDims : Reason::kHierarchicalOnForcedDims;
  } else {
    if (comm.ranksPerNode == 0) {
      return ring(torus ? Reason::kRingTorusHeterogeneous : Reason::kRingHierarchicalHeterogeneous);
    }
    if (comm.nodes <= 1 || comm.ranksPerNode <= 1) {
      return ring(torus ? Reason::kRingTorusDegenerate : Reason::kRingHierarchicalDegenerate);
    }
    plan.reason = torus ? Reason::kTorusOnNodes : Reason::kHierarchicalOnNodes;
  }
  const double n = static_cast<double>(bytes);
  if (torus) {
    const TorusLayout layout = chooseTorusLayout(grid, settings, n, lossy.any());
    plan.torusPieces = layout.pieces;
    plan.torusColumn = layout.column;
  } else {
    plan.torusPieces = hierarchicalPiecesFor(grid, settings, n);
  }
  return plan;
}

}  // namespace gfshim
