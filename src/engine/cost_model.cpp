#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace gfshim {
namespace {

// Time of one step that moves `bytes` over every link class the ranks use at once: a flat ring
// or recursive doubling step has pairs inside nodes and pairs across nodes, and waits for the
// slower of the two.
double stepSeconds(const ClusterShape& shape, double bytes) {
  auto over = [bytes](const LinkCost& link) {
    return link.latencySeconds + bytes / link.bytesPerSecond;
  };
  double seconds = shape.ranksPerNode > 1 ? over(shape.intraNode) : 0;
  if (shape.nodes > 1) seconds = std::max(seconds, over(shape.interNode));
  return seconds;
}

}  // namespace

AlgorithmCost ringCost(const ClusterShape& shape, double bytes) {
  const int64_t p = shape.ranksPerNode * shape.nodes;
  AlgorithmCost cost;
  cost.latencySteps = 2 * (p - 1);
  const double chunk = bytes / static_cast<double>(p);
  cost.seconds = static_cast<double>(cost.latencySteps) * stepSeconds(shape, chunk) +
                 static_cast<double>(p - 1) * chunk / shape.reduceBytesPerSecond;
  return cost;
}

uint64_t fusionAloneBytes(const ClusterShape& shape) {
  const double saved = ringCost(shape, 0).seconds + kBucketOverheadSeconds;
  return static_cast<uint64_t>(saved * kCopyBytesPerSecond / 2);
}

AlgorithmCost torusCost(const ClusterShape& shape, double bytes) {
  const double x = static_cast<double>(shape.ranksPerNode);
  const double y = static_cast<double>(shape.nodes);
  AlgorithmCost cost;
  const int64_t rowSteps = 2 * (shape.ranksPerNode - 1);
  const int64_t columnSteps = 2 * (shape.nodes - 1);
  cost.latencySteps = rowSteps + columnSteps;
  // Rows: N/X per step inside the node. Columns: N/(XY) per rank, X ranks sharing one NIC.
  // Reductions: X-1 of N/X in the row, Y-1 of N/(XY) in the column.
  cost.seconds = static_cast<double>(rowSteps) *
                     (shape.intraNode.latencySeconds + bytes / x / shape.intraNode.bytesPerSecond) +
                 static_cast<double>(columnSteps) *
                     (shape.interNode.latencySeconds + bytes / y / shape.interNode.bytesPerSecond) +
                 ((x - 1) * bytes / x + (y - 1) * bytes / (x * y)) / shape.reduceBytesPerSecond;
  return cost;
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
