#include "engine/policy.h"

#include <gtest/gtest.h>

#include <utility>

namespace gfshim {
namespace {

CallInfo floatSum(int64_t count) {
  CallInfo call;
  call.count = count;
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.sendAddress = 0x10000;
  call.recvAddress = 0x80000;
  return call;
}

Settings settings(uint64_t minBytes = 1024, AlgoChoice algo = AlgoChoice::kAuto) {
  Settings s;
  s.minBytes = minBytes;
  s.segmentBytes = 4096;
  s.algo = algo;
  return s;
}

CommFacts comm(int size) {
  CommFacts facts;
  facts.size = size;
  return facts;
}

Reason decide(const CallInfo& call, const Settings& s, const CommFacts& c) {
  return planOnComm(planCall(call, s), c).reason;
}

TEST(Policy, LargeFloatSumGoesToTheRing) {
  const Plan plan = planOnComm(planCall(floatSum(1024), settings()), comm(4));
  EXPECT_EQ(plan.route, Route::kEngine);
  EXPECT_EQ(plan.algo, Algo::kRing);
  EXPECT_EQ(plan.reason, Reason::kAutoRing);
  EXPECT_EQ(plan.segmentBytes, 4096u);
  EXPECT_EQ(decide(floatSum(1024), settings(1024, AlgoChoice::kRing), comm(4)),
            Reason::kRingForced);
}

TEST(Policy, PassthroughTable) {
  struct Case {
    const char* name;
    CallInfo call;
    Settings settings;
    CommFacts comm;
    Reason expected;
  };
  auto with = [](CallInfo call, auto change) {
    change(call);
    return call;
  };
  Settings disabled = settings();
  disabled.enable = false;
  Settings noFusion = settings();
  noFusion.fusion = false;
  noFusion.fusionAvailable = true;
  CommFacts inter = comm(4);
  inter.interComm = true;
  CommFacts spanning = comm(4);
  spanning.spansWorlds = true;
  CommFacts disagreeing = comm(4);
  disagreeing.paramsAgree = false;
  const Case cases[] = {
      {"disabled", floatSum(1024), disabled, comm(4), Reason::kDisabled},
      {"nonblocking without MPI_THREAD_MULTIPLE",
       with(floatSum(1024), [](CallInfo& c) { c.nonblocking = true; }), settings(), comm(4),
       Reason::kFusionUnavailable},
      {"nonblocking with GFSHIM_FUSION=0",
       with(floatSum(1024), [](CallInfo& c) { c.nonblocking = true; }), noFusion, comm(4),
       Reason::kFusionOff},
      {"negative count", floatSum(-1), settings(0), comm(4), Reason::kInvalidCount},
      {"empty", floatSum(0), settings(0), comm(4), Reason::kEmpty},
      {"derived type", with(floatSum(1024), [](CallInfo& c) { c.dtype.reset(); }), settings(),
       comm(4), Reason::kUnsupportedDatatype},
      {"user op", with(floatSum(1024), [](CallInfo& c) { c.op.reset(); }), settings(), comm(4),
       Reason::kUserOp},
      {"band on float", with(floatSum(1024), [](CallInfo& c) { c.op = RedOp::kBitAnd; }),
       settings(), comm(4), Reason::kOpNotAllowed},
      {"minloc on int",
       with(floatSum(1024),
            [](CallInfo& c) {
              c.dtype = DType::kInt32;
              c.op = RedOp::kMinLoc;
            }),
       settings(), comm(4), Reason::kOpNotAllowed},
      {"small", floatSum(255), settings(1024), comm(4), Reason::kBelowMinBytes},
      {"null buffer", with(floatSum(1024), [](CallInfo& c) { c.recvAddress = 0; }), settings(),
       comm(4), Reason::kNullBuffer},
      {"null send buffer", with(floatSum(1024), [](CallInfo& c) { c.sendAddress = 0; }), settings(),
       comm(4), Reason::kNullBuffer},
      {"aliased", with(floatSum(1024), [](CallInfo& c) { c.sendAddress = c.recvAddress; }),
       settings(), comm(4), Reason::kOverlappingBuffers},
      {"overlap",
       with(floatSum(1024), [](CallInfo& c) { c.sendAddress = c.recvAddress - 4 * 1023; }),
       settings(), comm(4), Reason::kOverlappingBuffers},
      {"native", floatSum(1024), settings(1024, AlgoChoice::kNative), comm(4), Reason::kAlgoNative},
      {"intercomm", floatSum(1024), settings(), inter, Reason::kInterComm},
      {"spans worlds", floatSum(1024), settings(), spanning, Reason::kSpansWorlds},
      {"params disagree", floatSum(1024), settings(), disagreeing, Reason::kParamsDisagree},
      {"one rank", floatSum(1024), settings(), comm(1), Reason::kSingleRank},
  };
  for (const Case& c : cases) {
    const Plan plan = planOnComm(planCall(c.call, c.settings), c.comm);
    EXPECT_EQ(plan.route, Route::kPassthrough) << c.name;
    EXPECT_EQ(plan.reason, c.expected) << c.name << ": got " << reasonText(plan.reason);
    EXPECT_FALSE(isEngineReason(plan.reason)) << c.name;
  }
}

TEST(Policy, ThresholdIsInclusiveAndCountsBytes) {
  EXPECT_EQ(decide(floatSum(256), settings(1024), comm(2)), Reason::kAutoRing);
  EXPECT_EQ(decide(floatSum(255), settings(1024), comm(2)), Reason::kBelowMinBytes);
  CallInfo doubles = floatSum(128);
  doubles.dtype = DType::kFloat64;
  EXPECT_EQ(decide(doubles, settings(1024), comm(2)), Reason::kAutoRing);
}

// Invariant 2: the decision depends only on what must match across ranks. Rank-local facts
// of a correct program (buffer addresses, MPI_IN_PLACE, the rank) never change the plan.
TEST(Policy, RankLocalFactsOfCorrectCallsDoNotChangeThePlan) {
  const Reason reference = decide(floatSum(1024), settings(), comm(4));
  EXPECT_EQ(reference, Reason::kAutoRing);
  CallInfo inPlace = floatSum(1024);
  inPlace.inPlace = true;
  inPlace.sendAddress = 1;  // MPI_IN_PLACE's value does not matter
  EXPECT_EQ(decide(inPlace, settings(), comm(4)), reference);
  CallInfo elsewhere = floatSum(1024);
  elsewhere.sendAddress = 0x7f0000000000;
  elsewhere.recvAddress = 0x100000;
  EXPECT_EQ(decide(elsewhere, settings(), comm(4)), reference);
  CallInfo adjacent = floatSum(1024);
  adjacent.sendAddress = adjacent.recvAddress + 4 * 1024;  // touching, not overlapping
  EXPECT_EQ(decide(adjacent, settings(), comm(4)), reference);
  CommFacts rank3 = comm(4);
  rank3.rank = 3;
  EXPECT_EQ(decide(floatSum(1024), settings(), rank3), reference);
}

TEST(Policy, EveryReasonHasText) {
  for (int i = 0; i < kReasonCount; ++i) {
    EXPECT_STRNE(reasonText(static_cast<Reason>(i)), "?") << i;
  }
}

TEST(Policy, IallreducesOfAnySizeAreFusedWhenTheThreadCanRun) {
  Settings s = settings(1 << 20);
  s.fusionAvailable = true;
  CallInfo tiny = floatSum(1);
  tiny.nonblocking = true;
  const Plan plan = planOnComm(planCall(tiny, s), comm(4));
  EXPECT_EQ(plan.route, Route::kEngine);
  EXPECT_EQ(plan.reason, Reason::kFused);
  // ... but never on one rank, nor the calls the engine cannot reduce.
  EXPECT_EQ(decide(tiny, s, comm(1)), Reason::kSingleRank);
  tiny.op.reset();
  EXPECT_EQ(decide(tiny, s, comm(4)), Reason::kUserOp);
  // Blocking calls keep GFSHIM_MIN_BYTES.
  EXPECT_EQ(decide(floatSum(1), s, comm(4)), Reason::kBelowMinBytes);
}

// Where the MPI's own nonblocking collectives may run beside the shim's progress, a small
// MPI_Iallreduce goes to the MPI (the fused path costs more than its whole call); from the
// threshold on it is fused. Reproducible mode keeps every floating-point call.
TEST(Policy, SmallIallreducesGoToTheMpiBelowFusionMinBytes) {
  Settings s = settings(1 << 20);
  s.fusionAvailable = true;
  s.nativeIallreduceBesideFusion = true;
  s.fusionMinBytes = 4096;
  CallInfo call = floatSum(1023);
  call.nonblocking = true;
  EXPECT_EQ(decide(call, s, comm(4)), Reason::kBelowFusionMin);
  call.count = 1024;  // 4096 bytes: fused
  EXPECT_EQ(decide(call, s, comm(4)), Reason::kFused);
  call.count = 1023;
  s.reproducible = true;
  EXPECT_EQ(decide(call, s, comm(4)), Reason::kFused);
  s.reproducible = false;
  s.nativeIallreduceBesideFusion = false;  // an Open MPI progress thread: everything queued
  EXPECT_EQ(decide(call, s, comm(4)), Reason::kFused);
}

// GFSHIM_ALGO=auto: the cost model's lowest prediction wins, from agreed facts only.
CommFacts cluster(int nodes, int ranksPerNode) {
  CommFacts facts;
  facts.size = nodes * ranksPerNode;
  facts.nodes = nodes;
  facts.ranksPerNode = ranksPerNode;
  facts.intraLink = {1e-6, 100e9 / 8};
  facts.interLink = {20e-6, 10e9 / 8};
  return facts;
}

Plan autoPlan(int64_t bytes, const CommFacts& facts, const Settings& s = settings()) {
  CallInfo call = floatSum(bytes / 4);
  call.inPlace = true;
  const Plan plan = planOnComm(planCall(call, s), facts);
  return chooseAlgorithm(plan, facts, s, DType::kFloat32, RedOp::kSum,
                         static_cast<uint64_t>(bytes));
}

TEST(AutoPolicy, OneNodeRunsTheRingAndNeverConsidersTheTorus) {
  const Plan plan = autoPlan(64 << 20, cluster(1, 4));
  EXPECT_EQ(plan.reason, Reason::kAutoRing);
  EXPECT_EQ(plan.algo, Algo::kRing);
  EXPECT_LT(plan.estimate.torusSeconds, 0);
  EXPECT_GT(plan.estimate.nativeSeconds, plan.estimate.ringSeconds);
}

TEST(AutoPolicy, SeveralRanksPerNodeOnSeveralNodesRunTheTorusForLargeMessages) {
  const Plan plan = autoPlan(64 << 20, cluster(4, 2));
  EXPECT_EQ(plan.reason, Reason::kAutoTorus);
  EXPECT_EQ(plan.algo, Algo::kTorus2d);
  EXPECT_LT(plan.estimate.torusSeconds, plan.estimate.ringSeconds);
  // Nodes of different sizes have no grid: the torus is no candidate.
  CommFacts uneven = cluster(4, 2);
  uneven.ranksPerNode = 0;
  EXPECT_EQ(autoPlan(64 << 20, uneven).reason, Reason::kAutoRing);
  EXPECT_LT(autoPlan(64 << 20, uneven).estimate.torusSeconds, 0);
}

// The model's figures of the MPI and the CPU are parameters (GFSHIM_RENDEZVOUS_US,
// GFSHIM_REDUCE_GBPS, agreed across ranks): on ABCI's links (16 nodes x 4, 200 and 400 Gbit/s,
// 2 us) a 16 MB call takes the torus where messages pay a 6 us rendezvous and a core reduces at
// 10 GB/s, and the ring where neither costs anything, as on SimGrid's simulated ranks, where the
// ring is the faster (bench/RESULTS.md, "At scale, simulated").
TEST(AutoPolicy, TheRendezvousAndReductionFiguresAreTheAgreedOnes) {
  CommFacts abci = cluster(16, 4);
  abci.intraLink = {2e-6, 400e9 / 8};
  abci.interLink = {2e-6, 200e9 / 8};
  EXPECT_EQ(autoPlan(16 << 20, abci).algo, Algo::kTorus2d);
  CommFacts simulated = abci;
  simulated.rendezvousSeconds = 0;
  simulated.reduceBytesPerSecond = 1e18;
  const Plan plan = autoPlan(16 << 20, simulated);
  EXPECT_EQ(plan.algo, Algo::kRing);
  EXPECT_LT(plan.estimate.ringSeconds, autoPlan(16 << 20, abci).estimate.ringSeconds);
}

TEST(AutoPolicy, ManyNodesPassSmallMessagesToTheMpiAndKeepLargeOnes) {
  // 64 nodes: a 256 KB ring pays 126 latencies; recursive doubling 6 (with the full buffer).
  const Plan small = autoPlan(256 << 10, cluster(64, 1));
  EXPECT_EQ(small.route, Route::kPassthrough);
  EXPECT_EQ(small.reason, Reason::kAutoNative);
  EXPECT_LT(small.estimate.nativeSeconds, small.estimate.ringSeconds);
  EXPECT_EQ(autoPlan(64 << 20, cluster(64, 1)).reason, Reason::kAutoRing);
  // A slower network moves the crossover: with 1 Gbit/s links the 256 KB call stays in the ring.
  CommFacts slow = cluster(64, 1);
  slow.interLink.bytesPerSecond = 1e9 / 8;
  slow.interLink.latencySeconds = 1e-6;
  EXPECT_EQ(autoPlan(256 << 10, slow).reason, Reason::kAutoRing);
}

// Four ranks on a node with fewer CPUs: the ring's six steps each wait for a descheduled peer,
// recursive doubling's two do, so a 512 KB call goes to the MPI there and to the ring otherwise.
// Calibrated on 4 ranks of the 2-core development VM (cost_model.h): 2M calls go to the MPI (the
// ring lost there), 4M calls to the ring (it won), and a lone MPI_Iallreduce of 2M stays the MPI's.
TEST(AutoPolicy, AnOversubscribedNodePassesMidSizesToTheMpi) {
  CommFacts crowded = cluster(1, 4);
  crowded.ranksPerCpu = 2;
  EXPECT_EQ(autoPlan(512 << 10, cluster(1, 4)).reason, Reason::kAutoRing);
  EXPECT_EQ(autoPlan(512 << 10, crowded).reason, Reason::kAutoNative);
  EXPECT_EQ(autoPlan(2 << 20, crowded).reason, Reason::kAutoNative);
  EXPECT_EQ(autoPlan(4 << 20, crowded).reason, Reason::kAutoRing);
  EXPECT_GT(fusedAloneBeatsNativeBytesOn(crowded), uint64_t{2} << 20);
  EXPECT_EQ(autoPlan(64 << 20, crowded).reason, Reason::kAutoRing);
  EXPECT_GT(fusedAloneBeatsNativeBytesOn(crowded), fusedAloneBeatsNativeBytesOn(cluster(1, 4)));
}

// The emulated cluster: 4 nodes x 2 ranks, 1 Gbit/s with UCX's 55 us between nodes, the links
// the ranks agree on there (bench/emulated_cluster.sh); on the 2-core host, 4 ranks a CPU.
CommFacts emulatedCluster(double ranksPerCpu) {
  CommFacts emulated = cluster(4, 2);
  emulated.interLink = {55e-6, 1e9 / 8};
  emulated.intraLink = {0.09e-6, 102e9 / 8};
  emulated.ranksPerCpu = ranksPerCpu;
  return emulated;
}

// 4 ranks a CPU, not 2: each latency step waits three times as long, and a lone MPI_Iallreduce
// of 128-256 KB (which lost fused, 1.59-1.93x native, with the 2-ranks figure) stays with the
// MPI's own; 1 MB is still fused.
TEST(AutoPolicy, MoreRanksACpuKeepLargerLoneCallsWithTheMpi) {
  const uint64_t twoACpu = fusedAloneBeatsNativeBytesOn(emulatedCluster(2));
  const uint64_t fourACpu = fusedAloneBeatsNativeBytesOn(emulatedCluster(4));
  EXPECT_LT(twoACpu, uint64_t{128} << 10);
  EXPECT_GT(fourACpu, uint64_t{256} << 10);
  EXPECT_LT(fourACpu, uint64_t{1} << 20);
}

// Oversubscribed, auto's torus keeps ring columns where the model would take halving (whole
// halves lost to pipelined segments on the crowded emulated cluster); GFSHIM_TORUS_COLUMN still
// chooses.
TEST(AutoPolicy, CrowdedNodesKeepRingColumns) {
  Settings s = settings();
  s.torusColumn = TorusColumnChoice::kHalving;
  const Plan halving = autoPlan(4 << 20, emulatedCluster(4), s);
  ASSERT_EQ(halving.algo, Algo::kTorus2d);
  EXPECT_EQ(halving.torusColumn, TorusColumn::kHalvingDoubling);
  const Plan crowded = autoPlan(4 << 20, emulatedCluster(4));
  ASSERT_EQ(crowded.algo, Algo::kTorus2d);
  EXPECT_EQ(crowded.torusColumn, TorusColumn::kRing);
  EXPECT_EQ(autoPlan(4 << 20, emulatedCluster(1)).torusColumn, TorusColumn::kHalvingDoubling);
}

// The torus's pieces come from the model (large calls on a slow network: several) unless
// GFSHIM_TORUS_PIECES fixes them; the ring never carries any.
TEST(AutoPolicy, TorusPiecesFromTheModelOrTheParameter) {
  CommFacts slow = cluster(4, 4);
  slow.interLink = {50e-6, 1e9 / 8};
  slow.intraLink = {1e-6, 2e9};
  const Plan big = autoPlan(256 << 20, slow);
  ASSERT_EQ(big.algo, Algo::kTorus2d);
  EXPECT_GT(big.torusPieces, 1u);
  Settings fixed = settings();
  fixed.torusPieces = 3;
  EXPECT_EQ(autoPlan(256 << 20, slow, fixed).torusPieces, 3u);
  Settings forced = settings(0, AlgoChoice::kTorus2d);
  forced.torusPieces = 5;
  CallInfo call = floatSum(1 << 20);
  call.inPlace = true;
  EXPECT_EQ(chooseAlgorithm(planOnComm(planCall(call, forced), slow), slow, forced, DType::kFloat32,
                            RedOp::kSum, 4 << 20)
                .torusPieces,
            5u);
  EXPECT_EQ(autoPlan(64 << 20, cluster(1, 4)).torusPieces, 1u);
}

// GFSHIM_TORUS_COLUMN: auto takes recursive halving and doubling where many nodes make the
// ring's 2(Y-1) steps the cost and keeps the ring on few; ring and halving are taken as given,
// forced torus2d or not; a lossy call's compressed torus keeps ring columns whatever was asked.
TEST(AutoPolicy, TorusColumnsFromTheModelOrTheParameter) {
  CommFacts many = cluster(256, 4);
  many.interLink = {2e-6, 200e9 / 8};
  many.intraLink = {2e-6, 400e9 / 8};
  const Plan wide = autoPlan(16 << 20, many);
  ASSERT_EQ(wide.algo, Algo::kTorus2d);
  EXPECT_EQ(wide.torusColumn, TorusColumn::kHalvingDoubling);
  CommFacts few = cluster(3, 4);
  few.interLink = {2e-6, 1e9 / 8};
  const Plan narrow = autoPlan(256 << 20, few);
  ASSERT_EQ(narrow.algo, Algo::kTorus2d);
  EXPECT_EQ(narrow.torusColumn, TorusColumn::kRing);  // 3 nodes: halving would fold, 2 N more

  Settings ring = settings();
  ring.torusColumn = TorusColumnChoice::kRing;
  EXPECT_EQ(autoPlan(16 << 20, many, ring).torusColumn, TorusColumn::kRing);
  EXPECT_GT(autoPlan(16 << 20, many, ring).estimate.torusSeconds, wide.estimate.torusSeconds);
  Settings halving = settings(0, AlgoChoice::kTorus2d);
  halving.torusColumn = TorusColumnChoice::kHalving;
  EXPECT_EQ(autoPlan(256 << 20, few, halving).torusColumn, TorusColumn::kHalvingDoubling);
  Settings lossy = halving;
  lossy.compress = WireCodec::kFp16;
  const Plan compressed = autoPlan(256 << 20, few, lossy);
  EXPECT_EQ(compressed.algo, Algo::kTorus2d);
  EXPECT_TRUE(compressed.lossy.any());
  EXPECT_EQ(compressed.torusColumn, TorusColumn::kRing);
  Settings lossyAuto = settings();
  lossyAuto.compress = WireCodec::kFp16;
  EXPECT_EQ(autoPlan(16 << 20, many, lossyAuto).torusColumn, TorusColumn::kRing);
  // The ring and the native candidates carry no column pass.
  EXPECT_EQ(autoPlan(64 << 20, cluster(1, 4)).torusColumn, TorusColumn::kRing);

  // Split columns only when asked for: on 864 nodes (27 x 32, Mikami et al.'s) the model has
  // them fastest, but auto keeps ring and halving (the simulation disagreed at 3456 ranks).
  CommFacts abci = cluster(864, 4);
  abci.interLink = many.interLink;
  abci.intraLink = many.intraLink;
  const Plan mikami = autoPlan(16 << 20, abci);
  ASSERT_EQ(mikami.algo, Algo::kTorus2d);
  EXPECT_EQ(mikami.torusColumn, TorusColumn::kHalvingDoubling);
  Settings split = settings();
  split.torusColumn = TorusColumnChoice::kSplit;
  EXPECT_EQ(autoPlan(256 << 20, few, split).torusColumn, TorusColumn::kRingThenHalving);
  EXPECT_EQ(autoPlan(16 << 20, abci, split).torusColumn, TorusColumn::kRingThenHalving);
  EXPECT_LT(autoPlan(16 << 20, abci, split).estimate.torusSeconds, mikami.estimate.torusSeconds);
}

TEST(AutoPolicy, ForcedDimsMakeTheTorusACandidateAndForcedAlgorithmsIgnoreTheModel) {
  Settings forced = settings();
  forced.torusX = 2;
  forced.torusY = 2;
  EXPECT_GE(autoPlan(64 << 20, cluster(1, 4), forced).estimate.torusSeconds, 0);
  const Plan ring = autoPlan(256 << 10, cluster(64, 1), settings(1024, AlgoChoice::kRing));
  EXPECT_EQ(ring.reason, Reason::kRingForced);
  EXPECT_LT(ring.estimate.ringSeconds, 0);
  EXPECT_EQ(formatEstimate(ring.estimate), "");
  EXPECT_NE(formatEstimate(autoPlan(64 << 20, cluster(4, 2)).estimate).find("torus2d "),
            std::string::npos);
}

// The hierarchical candidate: predicted wherever the torus is (exact calls only), chosen only
// where its prediction is strictly the lowest, which on the layouts the project measures
// (nodes x ranks 4x1, 2x2, 4x2 at 1 Gbit/s between nodes, fast shared memory) it never is.
TEST(AutoPolicy, HierarchicalIsACandidateChosenOnlyWhereItIsCheapest) {
  for (const auto& [nodes, ranksPerNode] : {std::pair{4, 1}, std::pair{2, 2}, std::pair{4, 2}}) {
    CommFacts measured = cluster(nodes, ranksPerNode);
    measured.interLink = {50e-6, 0.956e9 / 8};
    measured.intraLink = {0.09e-6, 102e9 / 8};
    for (int64_t bytes : {int64_t{4} << 20, int64_t{64} << 20, int64_t{256} << 20}) {
      const Plan plan = autoPlan(bytes, measured);
      const CostEstimate& e = plan.estimate;
      EXPECT_NE(plan.algo, Algo::kHierarchical) << nodes << "x" << ranksPerNode << " " << bytes;
      EXPECT_EQ(e.hierarchicalSeconds >= 0, ranksPerNode > 1);
      if (e.hierarchicalSeconds >= 0) {
        EXPECT_GE(e.hierarchicalSeconds, e.torusSeconds);
      }
    }
  }
  EXPECT_NE(formatEstimate(autoPlan(64 << 20, cluster(4, 2)).estimate).find("hierarchical "),
            std::string::npos);
  // A tie is no win: one rank on each of 4 nodes, forced into a 1x4 grid with ring columns,
  // predicts the ring's time for all three, and the ring keeps the call.
  Settings column = settings();
  column.torusX = 1;
  column.torusY = 4;
  column.torusColumn = TorusColumnChoice::kRing;
  const Plan tie = autoPlan(64 << 20, cluster(4, 1), column);
  EXPECT_DOUBLE_EQ(tie.estimate.hierarchicalSeconds, tie.estimate.ringSeconds);
  EXPECT_DOUBLE_EQ(tie.estimate.torusSeconds, tie.estimate.ringSeconds);
  EXPECT_EQ(tie.reason, Reason::kAutoRing);
  // No compressed form: a lossy call does not consider it.
  Settings lossy = settings();
  lossy.compress = WireCodec::kFp16;
  EXPECT_LT(autoPlan(64 << 20, cluster(4, 2), lossy).estimate.hierarchicalSeconds, 0);
}

// GFSHIM_ALGO=hierarchical: on nodes as rows or on GFSHIM_TORUS_DIMS, with the torus's grid
// fallbacks under reasons of its own, and the ring under a lossy mode.
TEST(ForcedPolicy, HierarchicalFallsBackToTheRingWithItsOwnReasons) {
  Settings s = settings(0, AlgoChoice::kHierarchical);
  CallInfo call = floatSum(1 << 20);
  call.inPlace = true;
  auto forced = [&](const CommFacts& facts, const Settings& with) {
    return chooseAlgorithm(planOnComm(planCall(call, with), facts), facts, with, DType::kFloat32,
                           RedOp::kSum, 4 << 20);
  };
  EXPECT_EQ(planCall(call, s).algo, Algo::kHierarchical);
  const Plan onNodes = forced(cluster(4, 2), s);
  EXPECT_EQ(onNodes.algo, Algo::kHierarchical);
  EXPECT_EQ(onNodes.reason, Reason::kHierarchicalOnNodes);
  EXPECT_LT(onNodes.estimate.hierarchicalSeconds, 0);  // forced: the model is not asked
  CommFacts uneven = cluster(4, 2);
  uneven.ranksPerNode = 0;
  EXPECT_EQ(forced(uneven, s).reason, Reason::kRingHierarchicalHeterogeneous);
  EXPECT_EQ(forced(cluster(1, 4), s).reason, Reason::kRingHierarchicalDegenerate);
  EXPECT_EQ(forced(cluster(4, 1), s).algo, Algo::kRing);
  Settings dims = s;
  dims.torusX = 2;
  dims.torusY = 2;
  EXPECT_EQ(forced(cluster(1, 4), dims).reason, Reason::kHierarchicalOnForcedDims);
  EXPECT_EQ(forced(cluster(1, 6), dims).reason, Reason::kRingHierarchicalDimsMismatch);
  Settings pieces = dims;
  pieces.torusPieces = 5;
  EXPECT_EQ(forced(cluster(1, 4), pieces).torusPieces, 5u);
  Settings lossy = s;
  lossy.compress = WireCodec::kFp16;
  const Plan compressed = forced(cluster(4, 2), lossy);
  EXPECT_EQ(compressed.algo, Algo::kRing);
  EXPECT_EQ(compressed.reason, Reason::kRingHierarchicalLossy);
  EXPECT_TRUE(isEngineReason(Reason::kRingHierarchicalLossy));
  EXPECT_STREQ(reasonText(Reason::kAutoHierarchical), "hierarchical (auto: lowest predicted time)");
}

// Lossy modes are opt-in and only for float SUM at or above GFSHIM_COMPRESS_MIN_BYTES.
TEST(LossyPolicy, OffUnlessAskedAndOnlyForLargeFloatSums) {
  Settings s = Settings{};
  s.compressMinBytes = 1 << 20;
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 64 << 20, s).any());
  s.compress = WireCodec::kFp16;
  s.cscDensity = 0.1;
  const LossyModes big = lossyModesFor(DType::kFloat32, RedOp::kSum, 64 << 20, s);
  EXPECT_EQ(big.codec, WireCodec::kFp16);
  EXPECT_TRUE(big.sparse);
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, (1 << 20) - 4, s).any());
  EXPECT_FALSE(lossyModesFor(DType::kFloat64, RedOp::kSum, 64 << 20, s).any());
  EXPECT_FALSE(lossyModesFor(DType::kInt32, RedOp::kSum, 64 << 20, s).any());
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kMax, 64 << 20, s).any());
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kProd, 64 << 20, s).any());
  s.cscDensity = 0;
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 64 << 20, s).sparse);
}

// Under momentum correction with the update output the shim keeps the optimizer's momentum, so
// every float SUM call of any size goes through its momentum state: none is small, none goes to
// the MPI's own; below GFSHIM_COMPRESS_MIN_BYTES it runs dense (denseMomentum), above it sparse.
TEST(LossyPolicy, MomentumCorrectionTakesEveryFloatSumDenseBelowTheLossyThreshold) {
  Settings s = settings(256 << 10, AlgoChoice::kAuto);
  s.compressMinBytes = 1 << 20;
  s.cscDensity = 0.1;
  const CallInfo blocking = floatSum(1000);  // 4000 bytes: below both thresholds
  CallInfo nonblocking = floatSum(1000);
  nonblocking.nonblocking = true;
  s.fusion = true;
  s.fusionAvailable = true;
  s.fusionMinBytes = 64 << 10;
  s.nativeIallreduceBesideFusion = true;
  EXPECT_EQ(planCall(blocking, s).reason, Reason::kBelowMinBytes);  // no momentum: thresholds hold
  EXPECT_EQ(planCall(nonblocking, s).reason, Reason::kBelowFusionMin);
  EXPECT_TRUE(mayGoToNativeIallreduce(nonblocking, s));
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4000, s).any());
  EXPECT_FALSE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, 4000, s));
  s.cscMomentum = 0.9;
  EXPECT_TRUE(momentumTakesEveryFloatSum(s));
  EXPECT_TRUE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, 4000, s));
  EXPECT_FALSE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, 1 << 20, s));
  EXPECT_FALSE(keptApartInBuckets(DType::kFloat64, RedOp::kSum, 4000, s));
  EXPECT_EQ(planCall(blocking, s).route, Route::kEngine);
  EXPECT_EQ(planCall(nonblocking, s).route, Route::kEngine);
  EXPECT_FALSE(mayGoToNativeIallreduce(nonblocking, s));
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kFloat32, RedOp::kSum, false), 0);
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kFloat32, RedOp::kSum, true), 0);
  const LossyModes small = lossyModesFor(DType::kFloat32, RedOp::kSum, 4000, s);
  EXPECT_TRUE(small.sparse);
  EXPECT_TRUE(small.denseMomentum);
  EXPECT_EQ(small.codec, WireCodec::kNone);
  const LossyModes large = lossyModesFor(DType::kFloat32, RedOp::kSum, 1 << 20, s);
  EXPECT_TRUE(large.sparse);
  EXPECT_FALSE(large.denseMomentum);
  // Under auto the MPI's own algorithm (predicted fastest for 4000 bytes) is no candidate.
  const Plan plan =
      chooseAlgorithm(planCall(blocking, s), comm(4), s, DType::kFloat32, RedOp::kSum, 4000);
  EXPECT_EQ(plan.route, Route::kEngine);
  EXPECT_TRUE(plan.lossy.denseMomentum);
  // A fused bucket is judged by its largest operation: 4 MB of small tensors stay dense, a bucket
  // of large ones is sparse. Without momentum correction, by its total.
  EXPECT_TRUE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4 << 20, s, 4000).denseMomentum);
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4 << 20, s, 2 << 20).denseMomentum);
  s.cscMomentum = 0;
  EXPECT_TRUE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4 << 20, s, 4000).sparse);
  s.cscMomentum = 0.9;
  // Other types and ops keep their thresholds and may go to the MPI's own.
  EXPECT_FALSE(lossyModesFor(DType::kFloat64, RedOp::kSum, 4000, s).any());
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kMax, 4000, s).any());
  EXPECT_GT(smallCallCountLimit(smallCallRule(s), DType::kFloat64, RedOp::kSum, false), 0);
  CallInfo doubles = nonblocking;
  doubles.dtype = DType::kFloat64;
  EXPECT_TRUE(mayGoToNativeIallreduce(doubles, s));
  // With the gradient output the application's optimizer gives small tensors their momentum:
  // they keep their thresholds and stay exact, fused apart from the sparse ones all the same.
  s.cscMomentumOutput = CscMomentumOutput::kGradient;
  EXPECT_FALSE(momentumTakesEveryFloatSum(s));
  EXPECT_EQ(planCall(blocking, s).reason, Reason::kBelowMinBytes);
  EXPECT_EQ(planCall(nonblocking, s).reason, Reason::kBelowFusionMin);
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4 << 20, s, 4000).any());
  EXPECT_TRUE(lossyModesFor(DType::kFloat32, RedOp::kSum, 4 << 20, s, 2 << 20).sparse);
  EXPECT_TRUE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, 4000, s));
}

// An operation between GFSHIM_COMPRESS_MIN_BYTES and GFSHIM_MIN_BYTES: as a blocking call the
// gradient output passes it to the MPI, so fused it must never be sparse either, whatever bucket
// the timing puts it in; the update output takes every float SUM, so it is sparse both ways.
TEST(LossyPolicy, MomentumSparsityBetweenTheThresholdsDoesNotDependOnTheBucket) {
  Settings s = settings(256 << 10, AlgoChoice::kAuto);
  s.compressMinBytes = 64 << 10;
  s.cscDensity = 0.1;
  s.cscMomentum = 0.9;
  const uint64_t between = 100 << 10;
  s.cscMomentumOutput = CscMomentumOutput::kGradient;
  EXPECT_EQ(momentumSparseMinBytes(s), uint64_t(256 << 10));
  EXPECT_EQ(planCall(floatSum(between / 4), s).reason, Reason::kBelowMinBytes);
  EXPECT_TRUE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, between, s));
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, 3 * between, s, between).any());
  EXPECT_TRUE(lossyModesFor(DType::kFloat32, RedOp::kSum, 3 * between, s, 256 << 10).sparse);
  // An MPI_Iallreduce below GFSHIM_FUSION_MIN_BYTES goes to the MPI's own where that runs
  // beside fusion: such a size is never corrected either.
  s.fusionMinBytes = 512 << 10;
  s.fusionAvailable = true;
  s.nativeIallreduceBesideFusion = true;
  EXPECT_EQ(momentumSparseMinBytes(s), uint64_t(512 << 10));
  CallInfo nonblocking = floatSum(between);  // 400 KB
  nonblocking.nonblocking = true;
  EXPECT_EQ(planCall(nonblocking, s).reason, Reason::kBelowFusionMin);
  EXPECT_FALSE(lossyModesFor(DType::kFloat32, RedOp::kSum, between * 4, s, between * 4).any());
  s.nativeIallreduceBesideFusion = false;
  EXPECT_EQ(momentumSparseMinBytes(s), uint64_t(256 << 10));
  s.cscMomentumOutput = CscMomentumOutput::kUpdate;
  EXPECT_EQ(momentumSparseMinBytes(s), uint64_t(64 << 10));
  EXPECT_EQ(planCall(floatSum(between / 4), s).route, Route::kEngine);
  EXPECT_FALSE(keptApartInBuckets(DType::kFloat32, RedOp::kSum, between, s));
  const LossyModes alone = lossyModesFor(DType::kFloat32, RedOp::kSum, between, s, between);
  EXPECT_TRUE(alone.sparse);
  EXPECT_FALSE(alone.denseMomentum);
}

// A lossy MPI_Iallreduce never goes to the MPI's own by the lone-call prediction: it cannot
// compress (the lossy modes would silently not run).
TEST(LossyPolicy, LossyIallreducesStayWithTheShim) {
  Settings s = settings(256 << 10, AlgoChoice::kAuto);
  s.compressMinBytes = 1 << 20;
  s.nativeIallreduceBesideFusion = true;
  CallInfo big = floatSum(1 << 20);  // 4 MB
  big.nonblocking = true;
  EXPECT_TRUE(mayGoToNativeIallreduce(big, s));
  s.compress = WireCodec::kFp16;
  EXPECT_FALSE(mayGoToNativeIallreduce(big, s));
  s.compress = WireCodec::kNone;
  s.cscDensity = 0.01;
  EXPECT_FALSE(mayGoToNativeIallreduce(big, s));
  CallInfo below = floatSum(1000);  // below GFSHIM_COMPRESS_MIN_BYTES: exact, may go
  below.nonblocking = true;
  EXPECT_TRUE(mayGoToNativeIallreduce(below, s));
}

TEST(LossyPolicy, MomentumAndClipWithoutDensityAreProblemsAndTheNoteNamesTheOptimizer) {
  Settings s = settings();
  EXPECT_TRUE(lossySettingProblems(s).empty());
  EXPECT_EQ(momentumNote(s), "");
  s.cscMomentum = 0.9;
  s.cscClip = 5;
  EXPECT_EQ(lossySettingProblems(s),
            (std::vector<std::string>{"GFSHIM_CSC_MOMENTUM does nothing without GFSHIM_CSC_DENSITY",
                                      "GFSHIM_CSC_CLIP does nothing without GFSHIM_CSC_DENSITY"}));
  EXPECT_EQ(momentumNote(s), "");
  s.cscDensity = 0.01;
  EXPECT_TRUE(lossySettingProblems(s).empty());
  EXPECT_NE(momentumNote(s).find("without momentum (plain SGD)"), std::string::npos);
  s.cscMomentumOutput = CscMomentumOutput::kGradient;
  EXPECT_NE(momentumNote(s).find("momentum-SGD optimizer with momentum 0.9"), std::string::npos);
  EXPECT_EQ(momentumNote(s).find("GFSHIM_CSC_MOMENTUM_DECAY"), std::string::npos);
  s.cscMomentumDecay = 0.25;
  EXPECT_NE(momentumNote(s).find("drops 0.25 of what it holds back each call"), std::string::npos);
  s.cscMomentum = 0;
  EXPECT_EQ(lossySettingProblems(s),
            (std::vector<std::string>{
                "GFSHIM_CSC_MOMENTUM_DECAY does nothing without GFSHIM_CSC_MOMENTUM"}));
}

TEST(LossyPolicy, PositionKeysWithoutDensityAndAStepWithoutPositionKeysAreProblems) {
  Settings s = settings();
  s.cscKey = CscKey::kPosition;
  EXPECT_EQ(lossySettingProblems(s),
            (std::vector<std::string>{"GFSHIM_CSC_KEY=position does nothing without GFSHIM_CSC_DENSITY"}));
  s.cscDensity = 0.1;
  s.cscStepOperations = 12;
  EXPECT_TRUE(lossySettingProblems(s).empty());
  s.cscKey = CscKey::kAddress;
  EXPECT_EQ(lossySettingProblems(s),
            (std::vector<std::string>{
                "GFSHIM_CSC_STEP_OPERATIONS does nothing without GFSHIM_CSC_KEY=position"}));
}

TEST(LossyPolicy, AutoKeepsALossyCallOnTheEngine) {
  Settings s = settings();
  s.compress = WireCodec::kBf16;
  s.compressMinBytes = 0;
  // The 256 KB call on 64 nodes would go to the MPI (see above); compressed, it stays in the ring.
  const Plan plan = autoPlan(256 << 10, cluster(64, 1), s);
  EXPECT_EQ(plan.route, Route::kEngine);
  EXPECT_EQ(plan.reason, Reason::kAutoRing);
  EXPECT_EQ(plan.lossy.codec, WireCodec::kBf16);
  // Exact plans carry no lossy mode.
  EXPECT_FALSE(autoPlan(64 << 20, cluster(4, 2)).lossy.any());
}

// GFSHIM_REPRODUCIBLE=1: floating-point calls of any size, blocking or fused, run the rank-ordered
// chain exact, whatever the algorithm and lossy settings; other types keep their algorithm.
TEST(ReproduciblePolicy, FloatingPointCallsOfAnySizeRunTheChainExact) {
  Settings s = settings(1 << 20, AlgoChoice::kTorus2d);
  s.reproducible = true;
  s.compress = WireCodec::kFp16;
  s.compressMinBytes = 0;
  s.cscDensity = 0.1;
  s.torusX = 2;
  s.torusY = 2;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kComplexFloat32, DType::kFloatInt}) {
    CallInfo call = floatSum(4);  // 16 bytes, far below GFSHIM_MIN_BYTES
    call.dtype = dtype;
    call.op = dtype == DType::kFloatInt ? RedOp::kMaxLoc : RedOp::kSum;
    for (bool nonblocking : {false, true}) {
      call.nonblocking = nonblocking;
      s.fusionAvailable = true;
      const Plan plan = chooseAlgorithm(planOnComm(planCall(call, s), comm(4)), comm(4), s, dtype,
                                        *call.op, call.bytes());
      EXPECT_EQ(plan.route, Route::kEngine) << dtypeName(dtype);
      EXPECT_EQ(plan.algo, Algo::kChain) << dtypeName(dtype);
      EXPECT_EQ(plan.reason, Reason::kReproducibleChain);
      EXPECT_FALSE(plan.lossy.any());
      EXPECT_EQ(plan.segmentBytes, s.segmentBytes);
    }
  }
  CallInfo ints = floatSum(1 << 20);
  ints.dtype = DType::kInt32;
  ints.recvAddress = ints.sendAddress + ints.bytes();
  const Plan plan = chooseAlgorithm(planOnComm(planCall(ints, s), comm(4)), comm(4), s,
                                    DType::kInt32, RedOp::kSum, ints.bytes());
  EXPECT_EQ(plan.algo, Algo::kTorus2d);
  ints.count = 4;
  EXPECT_EQ(decide(ints, s, comm(4)), Reason::kBelowMinBytes);
  // Off by default; GFSHIM_ALGO=native and GFSHIM_ENABLE=0 still pass everything through.
  EXPECT_EQ(decide(floatSum(4), settings(1 << 20), comm(4)), Reason::kBelowMinBytes);
  s.algo = AlgoChoice::kNative;
  EXPECT_EQ(decide(floatSum(4), s, comm(4)), Reason::kAlgoNative);
  s.enable = false;
  EXPECT_EQ(decide(floatSum(4), s, comm(4)), Reason::kDisabled);
}

}  // namespace
}  // namespace gfshim
