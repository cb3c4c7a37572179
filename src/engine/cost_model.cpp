#include "engine/cost_model.h"

#include <cmath>

namespace gfshim {
namespace {

// The link a step between ranks uses: between nodes as soon as there is more than one node.
const LinkCost& slowestLink(const ClusterShape& shape) {
  return shape.nodes > 1 ? shape.interNode : shape.intraNode;
}

}  // namespace

AlgorithmCost ringCost(const ClusterShape& shape, double bytes) {
  const int64_t p = shape.ranksPerNode * shape.nodes;
  AlgorithmCost cost;
  cost.latencySteps = 2 * (p - 1);
  const LinkCost& link = slowestLink(shape);
  cost.seconds = static_cast<double>(cost.latencySteps) *
                 (link.latencySeconds + bytes / static_cast<double>(p) / link.bytesPerSecond);
  return cost;
}

AlgorithmCost torusCost(const ClusterShape& shape, double bytes) {
  const double x = static_cast<double>(shape.ranksPerNode);
  const double y = static_cast<double>(shape.nodes);
  AlgorithmCost cost;
  const int64_t rowSteps = 2 * (shape.ranksPerNode - 1);
  const int64_t columnSteps = 2 * (shape.nodes - 1);
  cost.latencySteps = rowSteps + columnSteps;
  // Rows: N/X per step inside the node. Columns: N/(XY) per rank, X ranks sharing one NIC.
  cost.seconds = static_cast<double>(rowSteps) *
                     (shape.intraNode.latencySeconds + bytes / x / shape.intraNode.bytesPerSecond) +
                 static_cast<double>(columnSteps) *
                     (shape.interNode.latencySeconds + bytes / y / shape.interNode.bytesPerSecond);
  return cost;
}

AlgorithmCost recursiveDoublingCost(const ClusterShape& shape, double bytes) {
  const int64_t p = shape.ranksPerNode * shape.nodes;
  AlgorithmCost cost;
  cost.latencySteps =
      p > 1 ? static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(p)))) : 0;
  const LinkCost& link = slowestLink(shape);
  cost.seconds =
      static_cast<double>(cost.latencySteps) * (link.latencySeconds + bytes / link.bytesPerSecond);
  return cost;
}

}  // namespace gfshim
