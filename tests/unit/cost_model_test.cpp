#include "engine/cost_model.h"

#include <gtest/gtest.h>

#include <utility>

namespace gfshim {
namespace {

ClusterShape shape(int64_t x, int64_t y) {
  ClusterShape s;
  s.ranksPerNode = x;
  s.nodes = y;
  s.intraNode = {1e-6, 20e9};
  s.interNode = {5e-6, 7e9};  // 56 Gbit/s, as the GradientFlow cluster
  return s;
}

// The shape with free links inside nodes, no latency and no reduction cost: bandwidth terms
// only, 1 GB/s between nodes.
ClusterShape bandwidthOnly(int64_t x, int64_t y) {
  ClusterShape s = shape(x, y);
  s.intraNode = {0, 1e30};
  s.interNode = {0, 1e9};
  s.reduceBytesPerSecond = 1e30;
  s.rendezvousSeconds = 0;
  return s;
}

TEST(CostModel, ReproducesMikamiStepCounts) {
  // 3456 GPUs as a 4 x 864 grid (Mikami et al.): 1732 latency steps against 6910.
  EXPECT_EQ(torusCost(shape(4, 864), 1e8).latencySteps, 1732);
  EXPECT_EQ(ringCost(shape(4, 864), 1e8).latencySteps, 6910);
  EXPECT_EQ(recursiveDoublingCost(shape(4, 864), 1e8).latencySteps, 12);
}

// Columns by recursive halving and doubling: 2 log2 Y' steps (Y' the power of two at or below Y)
// and two more for the fold where Y is not one.
TEST(CostModel, HalvingColumnsCutTheColumnSteps) {
  const auto halving = TorusColumn::kHalvingDoubling;
  EXPECT_EQ(torusCost(shape(4, 864), 1e8, 1, halving).latencySteps, 2 * 3 + 2 * 9 + 2);
  EXPECT_EQ(torusCost(shape(4, 256), 1e8, 1, halving).latencySteps, 2 * 3 + 2 * 8);
  EXPECT_EQ(torusCost(shape(4, 256), 1e8, 4, halving).latencySteps, 4 * (2 * 3 + 2 * 8));
  EXPECT_EQ(torusCost(shape(2, 1), 1e8, 1, halving).latencySteps, 2);
  // Latency-bound on many nodes: far faster than ring columns.
  EXPECT_LT(torusCost(shape(4, 256), 1e4, 1, halving).seconds * 10,
            torusCost(shape(4, 256), 1e4).seconds);
}

// Bandwidth terms only: on a power of two the halving columns move the ring's bytes through
// each NIC (N/2 + N/4 + ... + N/Y, twice); otherwise the fold adds the whole piece twice.
TEST(CostModel, HalvingColumnsMoveTheRingsBytesOnPowersOfTwo) {
  ClusterShape s = bandwidthOnly(2, 8);
  const double n = 1e9;
  const auto halving = TorusColumn::kHalvingDoubling;
  EXPECT_NEAR(torusCost(s, n, 1, halving).seconds, 2.0 * 7 / 8 * n / 1e9, 1e-9);
  EXPECT_NEAR(torusCost(s, n).seconds, 2.0 * 7 / 8 * n / 1e9, 1e-9);
  s.nodes = 6;
  EXPECT_NEAR(torusCost(s, n, 1, halving).seconds, (2.0 * 3 / 4 + 2) * n / 1e9, 1e-9);
  EXPECT_NEAR(torusCost(s, n).seconds, 2.0 * 5 / 6 * n / 1e9, 1e-9);
}

// Split columns (Y = b * 2^a, b odd): a ring among b nodes, 2(b-1) steps, then halving among 2^a,
// 2a steps, with no fold; through each NIC the ring's bytes, 2(Y-1)/Y of the piece, where halving
// columns fold on a Y that is not a power of two.
TEST(CostModel, SplitColumnsRingTheOddFactorAndHalveThePowerOfTwo) {
  const auto split = TorusColumn::kRingThenHalving;
  EXPECT_EQ(torusCost(shape(4, 864), 1e8, 1, split).latencySteps, 2 * 3 + 2 * 26 + 2 * 5);
  EXPECT_EQ(torusCost(shape(4, 256), 1e8, 1, split).latencySteps,
            torusCost(shape(4, 256), 1e8, 1, TorusColumn::kHalvingDoubling).latencySteps);
  EXPECT_EQ(torusCost(shape(4, 27), 1e8, 1, split).latencySteps,
            torusCost(shape(4, 27), 1e8).latencySteps);
  ClusterShape s = bandwidthOnly(2, 6);
  const double n = 1e9;
  EXPECT_NEAR(torusCost(s, n, 1, split).seconds, 2.0 * 5 / 6 * n / 1e9, 1e-9);
  EXPECT_LT(torusCost(s, n, 1, split).seconds,
            torusCost(s, n, 1, TorusColumn::kHalvingDoubling).seconds);
  // Mikami et al.'s 864 ABCI nodes at 16 MB: fewer steps than ring columns, no fold.
  EXPECT_LT(torusCost(shape(4, 864), 16e6, 1, split).seconds,
            torusCost(shape(4, 864), 16e6, 1, TorusColumn::kHalvingDoubling).seconds);
}

TEST(CostModel, TorusMovesLessThroughEachNicThanTheFlatRing) {
  // Bandwidth terms only (no latency): the torus sends 2(Y-1)/Y N through a NIC, the flat ring
  // 2(p-1)/p N.
  const ClusterShape s = bandwidthOnly(2, 2);
  const double n = 1e9;
  EXPECT_NEAR(torusCost(s, n).seconds, 2.0 * 1 / 2 * n / 1e9, 1e-9);
  EXPECT_NEAR(ringCost(s, n).seconds, 2.0 * 3 / 4 * n / 1e9, 1e-9);
}

// A ring laid out node by node is a pipeline: its latency adds up along the ring, where one hop
// in X crosses nodes, while each node's link carries one chunk per step.
TEST(CostModel, TheRingPaysTheInterNodeLatencyOnOneHopInX) {
  ClusterShape s = shape(4, 16);
  s.intraNode = {1e-6, 1e30};
  s.interNode = {10e-6, 1e30};
  s.reduceBytesPerSecond = 1e30;
  s.rendezvousSeconds = 0;
  // No bytes: 126 steps of the mean hop, (10 + 3 x 1) / 4 us; not 126 x 10 us.
  EXPECT_NEAR(ringCost(s, 0).seconds, 126 * 13e-6 / 4, 1e-12);
  // Bandwidth-bound: each step is a chunk's time on the node's link.
  s.interNode = {10e-6, 1.25e9};
  const double chunk = 64e6 / 64;
  EXPECT_NEAR(ringCost(s, 64e6).seconds, 126 * chunk / 1.25e9, 1e-12);
  // One rank per node: every hop crosses nodes.
  ClusterShape flat = s;
  flat.ranksPerNode = 1;
  flat.nodes = 64;
  EXPECT_NEAR(ringCost(flat, 0).seconds, 126 * 10e-6, 1e-12);
}

TEST(CostModel, ReductionTermSeparatesTheRingFromRecursiveDoublingOnTwoRanks) {
  // Two ranks, no latency: the same bytes on the wire; the ring reduces half the buffer, once,
  // recursive doubling the whole buffer.
  ClusterShape s = shape(2, 1);
  s.intraNode = {0, 1e9};
  s.reduceBytesPerSecond = 2e9;
  s.rendezvousSeconds = 0;
  const double n = 1e9;
  EXPECT_NEAR(ringCost(s, n).seconds, n / 1e9 + n / 2 / 2e9, 1e-9);
  EXPECT_NEAR(recursiveDoublingCost(s, n).seconds, n / 1e9 + n / 2e9, 1e-9);
  // With a latency, the one step recursive doubling saves wins for small buffers only.
  s.intraNode.latencySeconds = 1e-6;
  EXPECT_LT(recursiveDoublingCost(s, 1000).seconds, ringCost(s, 1000).seconds);
  EXPECT_LT(ringCost(s, 1e6).seconds, recursiveDoublingCost(s, 1e6).seconds);
}

TEST(CostModel, LatencyBoundSmallMessagesFavourRecursiveDoubling) {
  const ClusterShape s = shape(4, 64);
  EXPECT_LT(recursiveDoublingCost(s, 1024).seconds, torusCost(s, 1024).seconds);
  EXPECT_LT(torusCost(s, 1024).seconds, ringCost(s, 1024).seconds);
  EXPECT_LT(torusCost(s, 256e6).seconds, recursiveDoublingCost(s, 256e6).seconds);
}

// An operation is reduced alone once two copies of it cost more than one more ring: more ranks
// and slower links make fusing larger operations pay.
TEST(CostModel, FusionAloneBytesGrowWithRingLatency) {
  const uint64_t twoRanks = fusionAloneBytes(shape(2, 1));
  EXPECT_EQ(twoRanks,
            static_cast<uint64_t>((ringCost(shape(2, 1), 0).seconds + kBucketOverheadSeconds) *
                                  kCopyBytesPerSecond / 2));
  EXPECT_LT(twoRanks, fusionAloneBytes(shape(2, 8)));
  ClusterShape slow = shape(2, 8);
  slow.interNode.latencySeconds *= 10;
  EXPECT_LT(fusionAloneBytes(shape(2, 8)), fusionAloneBytes(slow));
}

// The lone-call crossover is where the fused path (agreement, bucket overhead, ring) becomes
// predicted faster than recursive doubling: slower just below it, faster from it on.
TEST(CostModel, FusedAloneBeatsNativeFromTheCrossoverOn) {
  for (const ClusterShape& s : {shape(2, 1), shape(4, 1), shape(4, 2), shape(1, 16)}) {
    const uint64_t crossover = fusedAloneBeatsNativeBytes(s);
    ASSERT_GT(crossover, 0u);
    ASSERT_LT(crossover, uint64_t{1} << 40);
    auto fusedMinusNative = [&s](double bytes) {
      return recursiveDoublingCost(s, 0).latencySteps * (s.ranksPerNode > 1 && s.nodes == 1
                                                             ? s.intraNode.latencySeconds
                                                             : s.interNode.latencySeconds) +
             kBucketOverheadSeconds + ringCost(s, bytes).seconds -
             recursiveDoublingCost(s, bytes).seconds;
    };
    EXPECT_GE(fusedMinusNative(static_cast<double>(crossover - 1)), 0);
    EXPECT_LT(fusedMinusNative(static_cast<double>(crossover)), 0);
  }
  // One rank: nothing to save, the fused path only adds its overhead.
  EXPECT_EQ(fusedAloneBeatsNativeBytes(shape(1, 1)), UINT64_MAX);
}

// More ranks than CPUs on a node: every latency step costs kOversubscribedStepSeconds more (from
// 2 ranks a CPU on, that for each rank a CPU beyond the first), which the ring's many steps feel
// most, so lone calls stay with the MPI's own up to far larger sizes and fused operations are
// reduced alone only from far larger sizes; the more crowded, the larger.
TEST(CostModel, OversubscribedNodesMakeLatencyStepsCostly) {
  ClusterShape crowded = shape(4, 1);
  crowded.ranksPerCpu = 2;
  EXPECT_DOUBLE_EQ(ringCost(crowded, 0).seconds, 6 * (1e-6 + kOversubscribedStepSeconds));
  EXPECT_DOUBLE_EQ(recursiveDoublingCost(crowded, 0).seconds,
                   2 * (1e-6 + kOversubscribedStepSeconds));
  EXPECT_DOUBLE_EQ(torusCost(crowded, 0).seconds, ringCost(crowded, 0).seconds);
  EXPECT_GT(fusedAloneBeatsNativeBytes(crowded), 4 * fusedAloneBeatsNativeBytes(shape(4, 1)));
  EXPECT_GT(fusedAloneBeatsNativeBytes(crowded), uint64_t{1} << 20);
  EXPECT_GT(fusionAloneBytes(crowded), 8 * fusionAloneBytes(shape(4, 1)));

  ClusterShape packed = crowded;
  packed.ranksPerCpu = 4;
  EXPECT_DOUBLE_EQ(ringCost(packed, 0).seconds, 6 * (1e-6 + 3 * kOversubscribedStepSeconds));
  EXPECT_GT(fusedAloneBeatsNativeBytes(packed), 2 * fusedAloneBeatsNativeBytes(crowded));
  ClusterShape exactlyFull = crowded;
  exactlyFull.ranksPerCpu = 1;
  EXPECT_DOUBLE_EQ(ringCost(exactlyFull, 0).seconds, ringCost(shape(4, 1), 0).seconds);
  ClusterShape halfAgain = crowded;
  halfAgain.ranksPerCpu = 1.5;
  EXPECT_DOUBLE_EQ(ringCost(halfAgain, 0).seconds, ringCost(crowded, 0).seconds);
  // What gfshim-info --model prints as the step's extra cost.
  EXPECT_DOUBLE_EQ(oversubscribedStepSeconds(halfAgain), kOversubscribedStepSeconds);
  EXPECT_DOUBLE_EQ(oversubscribedStepSeconds(packed), 3 * kOversubscribedStepSeconds);
  EXPECT_DOUBLE_EQ(oversubscribedStepSeconds(exactlyFull), 0);
}

// Pieces overlap the row lane with the column lane: where the node links are the slower lane,
// more pieces hide the rows (down to the first scatter and the last gather), until the latency
// steps of the extra pieces cost more than they hide.
TEST(CostModel, TorusPiecesHideTheShorterLane) {
  ClusterShape slowNet = shape(4, 4);
  slowNet.interNode = {50e-6, 1e9 / 8};
  slowNet.intraNode = {1e-6, 2e9};
  const double n = 256e6;
  const double one = torusCost(slowNet, n).seconds;
  EXPECT_DOUBLE_EQ(torusCost(slowNet, n, 1).seconds, one);
  EXPECT_LT(torusCost(slowNet, n, 8).seconds, one);
  const int64_t best = bestTorusPieces(slowNet, n);
  EXPECT_GT(best, 1);
  EXPECT_LE(torusCost(slowNet, n, best).seconds, torusCost(slowNet, n, 2).seconds);
  EXPECT_EQ(torusCost(slowNet, n, 8).latencySteps, 8 * torusCost(slowNet, n).latencySteps);
  // No hiding possible: the latency of more pieces only costs.
  EXPECT_EQ(bestTorusPieces(slowNet, 1024), 1);
}

// A message of at least kRendezvousBytes pays the MPI's rendezvous on top of the latency: the
// ring's two steps on two ranks pay it twice, recursive doubling's one step once, so a lone call
// is fused only from larger sizes than a pure alpha-beta model says.
TEST(CostModel, LargeMessagesPayTheRendezvous) {
  ClusterShape s = shape(2, 1);
  ClusterShape alphaBeta = s;
  alphaBeta.rendezvousSeconds = 0;
  const double small = kRendezvousBytes - 4;  // per step: half of it, below the threshold
  EXPECT_DOUBLE_EQ(ringCost(s, small).seconds, ringCost(alphaBeta, small).seconds);
  const double large = 4 * kRendezvousBytes;
  EXPECT_DOUBLE_EQ(ringCost(s, large).seconds,
                   ringCost(alphaBeta, large).seconds + 2 * kRendezvousSeconds);
  EXPECT_DOUBLE_EQ(recursiveDoublingCost(s, large).seconds,
                   recursiveDoublingCost(alphaBeta, large).seconds + kRendezvousSeconds);
  EXPECT_GT(fusedAloneBeatsNativeBytes(s), fusedAloneBeatsNativeBytes(alphaBeta));
}

TEST(CostModel, OneRankCostsNothing) {
  EXPECT_EQ(ringCost(shape(1, 1), 1e6).latencySteps, 0);
  EXPECT_EQ(ringCost(shape(1, 1), 1e6).seconds, 0);
  EXPECT_EQ(recursiveDoublingCost(shape(1, 1), 1e6).latencySteps, 0);
}

}  // namespace
}  // namespace gfshim

namespace gfshim {
namespace {

// The leader-based hierarchical allreduce: the leaders' NIC carries the torus's bytes in the
// torus's inter-node steps, but each node's chains move N per rank against the torus's
// (X-1)/X N per row pass, so its prediction never falls below the torus's where a grid exists;
// on one rank per node it is the ring.
TEST(CostModel, HierarchicalNeverUndercutsTheTorusOnAGrid) {
  for (const auto& [x, y] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}, std::pair{8, 16}}) {
    for (double n : {64e3, 4e6, 64e6, 256e6}) {
      ClusterShape s = shape(x, y);
      s.interNode = {50e-6, 0.956e9 / 8};
      s.intraNode = {0.09e-6, 102e9 / 8};
      const int64_t pieces = bestHierarchicalPieces(s, n, 256 << 10);
      EXPECT_GE(hierarchicalCost(s, n, 256 << 10, pieces).seconds,
                torusCost(s, n, bestTorusPieces(s, n)).seconds)
          << x << "x" << y << " " << n;
    }
  }
  const ClusterShape column = shape(1, 4);
  EXPECT_DOUBLE_EQ(hierarchicalCost(column, 64e6, 256 << 10).seconds,
                   ringCost(column, 64e6).seconds);
}

TEST(CostModel, HierarchicalStepsAndPieces) {
  ClusterShape slowNet = shape(4, 4);
  slowNet.interNode = {50e-6, 1e9 / 8};
  slowNet.intraNode = {1e-6, 2e9};
  // Per piece: 3 hops down the chain, 3 back, 6 ring steps.
  EXPECT_EQ(hierarchicalCost(slowNet, 256e6, 256 << 10).latencySteps, 12);
  EXPECT_EQ(hierarchicalCost(slowNet, 256e6, 256 << 10, 8).latencySteps, 8 * 12);
  // The chains hide behind the leaders' ring once the buffer is in pieces.
  const double one = hierarchicalCost(slowNet, 256e6, 256 << 10).seconds;
  EXPECT_LT(hierarchicalCost(slowNet, 256e6, 256 << 10, 8).seconds, one);
  EXPECT_GT(bestHierarchicalPieces(slowNet, 256e6, 256 << 10), 1);
  EXPECT_EQ(bestHierarchicalPieces(slowNet, 1024, 256 << 10), 1);
  // Smaller segments fill a chain faster: a one-piece call gets cheaper.
  EXPECT_LT(hierarchicalCost(slowNet, 256e6, 1 << 20).seconds,
            hierarchicalCost(slowNet, 256e6, 256e6).seconds);
}

}  // namespace
}  // namespace gfshim
