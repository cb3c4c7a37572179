#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gfshim {
namespace {

double latencyOf(const ClusterShape& shape, const LinkCost& link) {
  return link.latencySeconds + oversubscribedStepSeconds(shape);
}

// One message of `bytes` over `link`: its latency, its rendezvous where the MPI sends it so, and
// its bytes.
double messageSeconds(const ClusterShape& shape, const LinkCost& link, double bytes) {
  return latencyOf(shape, link) + (bytes >= kRendezvousBytes ? shape.rendezvousSeconds : 0) +
         bytes / link.bytesPerSecond;
}

// Time of one step that moves `bytes` over every link class the ranks use at once: a flat ring
// or recursive doubling step has pairs inside nodes and pairs across nodes, and waits for the
// slower of the two.
double stepSeconds(const ClusterShape& shape, double bytes) {
  auto over = [&shape, bytes](const LinkCost& link) { return messageSeconds(shape, link, bytes); };
  double seconds = shape.ranksPerNode > 1 ? over(shape.intraNode) : 0;
  if (shape.nodes > 1) seconds = std::max(seconds, over(shape.interNode));
  return seconds;
}

// One step of a flat ring moving `chunk` bytes per rank (see ringCost): where nodes hold several
// ranks, the longer of the mean hop around the ring and a chunk's time on the slowest link;
// otherwise every hop is on one link class.
double ringStepSeconds(const ClusterShape& shape, double chunk) {
  if (shape.nodes == 1 || shape.ranksPerNode == 1) return stepSeconds(shape, chunk);
  const double x = static_cast<double>(shape.ranksPerNode);
  const double meanHop = (messageSeconds(shape, shape.interNode, chunk) +
                          (x - 1) * messageSeconds(shape, shape.intraNode, chunk)) /
                         x;
  const double wire = std::max(chunk / shape.interNode.bytesPerSecond,
                               chunk / shape.intraNode.bytesPerSecond);
  return std::max(meanHop, wire);
}

}  // namespace

double oversubscribedStepSeconds(const ClusterShape& shape) {
  const double crowding = shape.ranksPerCpu > 1 ? std::max(1.0, shape.ranksPerCpu - 1) : 0;
  return kOversubscribedStepSeconds * crowding;
}

// A ring laid out node by node is a pipeline, not a sequence of lock-step steps: a rank sends
// step k's chunk once step k-1's has come from the rank before it, so the latencies add up along
// the ring, where only one hop in X crosses a node boundary, while each node's link carries one
// chunk per step. A step takes the longer of the two: the mean hop around the ring, and a chunk's
// time on the slowest link. (Charging every step the inter-node latency, as the lock-step model
// did, put a 1 MB ring on 64 simulated ranks of 10 Gbit/s Ethernet 55 % above SimGrid's time.)
AlgorithmCost ringCost(const ClusterShape& shape, double bytes) {
  const int64_t p = shape.ranksPerNode * shape.nodes;
  AlgorithmCost cost;
  cost.latencySteps = 2 * (p - 1);
  const double chunk = bytes / static_cast<double>(p);
  const double step = ringStepSeconds(shape, chunk);
  cost.seconds = static_cast<double>(cost.latencySteps) * step +
                 static_cast<double>(p - 1) * chunk / shape.reduceBytesPerSecond;
  return cost;
}

uint64_t fusionAloneBytes(const ClusterShape& shape) {
  const double saved = ringCost(shape, 0).seconds + kBucketOverheadSeconds;
  return static_cast<uint64_t>(saved * kCopyBytesPerSecond / 2);
}

uint64_t fusedAloneBeatsNativeBytes(const ClusterShape& shape) {
  const double agreementSteps = recursiveDoublingCost(shape, 0).latencySteps;
  auto fusedWins = [&shape, agreementSteps](double bytes) {
    const double fused = agreementSteps * stepSeconds(shape, 0) + kBucketOverheadSeconds +
                         ringCost(shape, bytes).seconds;
    return fused < recursiveDoublingCost(shape, bytes).seconds;
  };
  // Both predictions grow linearly with the bytes (piecewise, across link classes), the fused
  // one more slowly: one crossover, found by bisection.
  uint64_t lo = 0, hi = uint64_t{1} << 40;
  if (fusedWins(0)) return 0;
  if (!fusedWins(static_cast<double>(hi))) return std::numeric_limits<uint64_t>::max();
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fusedWins(static_cast<double>(mid)) ? hi : lo) = mid;
  }
  return hi;
}

namespace {

// A ring allreduce of `piece` bytes a node among `nodes` nodes, each of the X ranks with its
// share: 2(nodes-1) steps of piece/nodes through the node's NIC.
AlgorithmCost columnRingCost(const ClusterShape& shape, double piece, int64_t nodes) {
  const double x = static_cast<double>(shape.ranksPerNode);
  const double y = static_cast<double>(nodes);
  AlgorithmCost cost;
  cost.latencySteps = 2 * (nodes - 1);
  cost.seconds =
      static_cast<double>(cost.latencySteps) * messageSeconds(shape, shape.interNode, piece / y) +
      (y - 1) * piece / (x * y) / shape.reduceBytesPerSecond;
  return cost;
}

// Recursive halving and doubling of `piece` bytes a node among `nodes` nodes: steps of piece/2,
// piece/4 ... through the NIC, each twice, and two of the whole piece where `nodes` is not a
// power of two (the fold).
AlgorithmCost columnHalvingCost(const ClusterShape& shape, double piece, int64_t nodes) {
  const double x = static_cast<double>(shape.ranksPerNode);
  AlgorithmCost cost;
  int64_t participants = 1;
  while (participants <= nodes / 2) participants *= 2;
  for (int64_t share = 2; share <= participants; share *= 2) {
    const double nicBytes = piece / static_cast<double>(share);
    cost.latencySteps += 2;
    cost.seconds += 2 * messageSeconds(shape, shape.interNode, nicBytes) +
                    nicBytes / x / shape.reduceBytesPerSecond;
  }
  if (participants < nodes) {
    cost.latencySteps += 2;
    cost.seconds +=
        2 * messageSeconds(shape, shape.interNode, piece) + piece / x / shape.reduceBytesPerSecond;
  }
  return cost;
}

// Split columns among `nodes` = b * 2^a nodes: a ring reduce-scatter and allgather among b (a ring
// allreduce's steps and bytes), and halving and doubling of its chunk, piece / b, among the 2^a.
AlgorithmCost columnSplitCost(const ClusterShape& shape, double piece, int64_t nodes) {
  const ColumnSplit split = columnSplit(static_cast<int>(nodes));
  AlgorithmCost cost = columnRingCost(shape, piece, split.ringNodes);
  const AlgorithmCost halving =
      columnHalvingCost(shape, piece / split.ringNodes, split.halvingNodes);
  cost.latencySteps += halving.latencySteps;
  cost.seconds += halving.seconds;
  return cost;
}

// The column pass of one torus piece of `piece` bytes: its steps and time (see torusCost).
AlgorithmCost torusColumnCost(const ClusterShape& shape, double piece, TorusColumn column) {
  switch (column) {
    case TorusColumn::kRing:
      return columnRingCost(shape, piece, shape.nodes);
    case TorusColumn::kHalvingDoubling:
      return columnHalvingCost(shape, piece, shape.nodes);
    case TorusColumn::kRingThenHalving:
      return columnSplitCost(shape, piece, shape.nodes);
  }
  return columnRingCost(shape, piece, shape.nodes);
}

}  // namespace

AlgorithmCost torusCost(const ClusterShape& shape, double bytes, int64_t pieces,
                        TorusColumn column) {
  const double x = static_cast<double>(shape.ranksPerNode);
  const double piece = bytes / static_cast<double>(std::max<int64_t>(pieces, 1));
  const int64_t rowSteps = shape.ranksPerNode - 1;  // per row pass
  // Rows: N/X per step inside the node, X-1 of N/X reduced. Columns: torusColumnCost.
  const double rowStep = messageSeconds(shape, shape.intraNode, piece / x);
  const double reduceScatter =
      static_cast<double>(rowSteps) * rowStep + (x - 1) * piece / x / shape.reduceBytesPerSecond;
  const double allgather = static_cast<double>(rowSteps) * rowStep;
  const AlgorithmCost columnPass = torusColumnCost(shape, piece, column);
  const double allreduce = columnPass.seconds;
  AlgorithmCost cost;
  cost.latencySteps = std::max<int64_t>(pieces, 1) * (2 * rowSteps + columnPass.latencySteps);
  cost.seconds = reduceScatter + allgather +
                 static_cast<double>(std::max<int64_t>(pieces, 1) - 1) *
                     std::max(reduceScatter + allgather, allreduce) +
                 allreduce;
  return cost;
}

int64_t bestTorusPieces(const ClusterShape& shape, double bytes, TorusColumn column) {
  int64_t best = 1;
  for (int64_t pieces = 2; pieces <= 64; pieces *= 2) {
    if (torusCost(shape, bytes, pieces, column).seconds <
        torusCost(shape, bytes, best, column).seconds) {
      best = pieces;
    }
  }
  return best;
}

AlgorithmCost hierarchicalCost(const ClusterShape& shape, double bytes, double segmentBytes,
                               int64_t pieces) {
  const int64_t parts = std::max<int64_t>(pieces, 1);
  const double y = static_cast<double>(shape.nodes);
  const double piece = bytes / static_cast<double>(parts);
  const double segments = std::max(1.0, std::ceil(piece / std::max(segmentBytes, 1.0)));
  const double segment = piece / segments;
  // A chain of X ranks: its last segment leaves X-1 hops after the first one started.
  const double hops =
      shape.ranksPerNode > 1 ? static_cast<double>(shape.ranksPerNode - 1) + segments - 1 : 0;
  const double hop = messageSeconds(shape, shape.intraNode, segment);
  const double reduce = hops * (hop + segment / shape.reduceBytesPerSecond);
  const double broadcast = hops * hop;
  const int64_t ringSteps = 2 * (shape.nodes - 1);
  const double allreduce =
      static_cast<double>(ringSteps) * messageSeconds(shape, shape.interNode, piece / y) +
      (y - 1) * piece / y / shape.reduceBytesPerSecond;
  AlgorithmCost cost;
  cost.latencySteps = parts * (2 * (shape.ranksPerNode - 1) + ringSteps);
  cost.seconds = reduce + broadcast +
                 static_cast<double>(parts - 1) * std::max(reduce + broadcast, allreduce) +
                 allreduce;
  return cost;
}

int64_t bestHierarchicalPieces(const ClusterShape& shape, double bytes, double segmentBytes) {
  int64_t best = 1;
  for (int64_t pieces = 2; pieces <= 64; pieces *= 2) {
    if (hierarchicalCost(shape, bytes, segmentBytes, pieces).seconds <
        hierarchicalCost(shape, bytes, segmentBytes, best).seconds) {
      best = pieces;
    }
  }
  return best;
}

AlgorithmCost recursiveDoublingCost(const ClusterShape& shape, double bytes) {
  const int64_t p = shape.ranksPerNode * shape.nodes;
  AlgorithmCost cost;
  cost.latencySteps =
      p > 1 ? static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(p)))) : 0;
  cost.seconds = static_cast<double>(cost.latencySteps) *
                 (stepSeconds(shape, bytes) + bytes / shape.reduceBytesPerSecond);
  return cost;
}

}  // namespace gfshim
