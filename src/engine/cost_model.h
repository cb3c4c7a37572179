// Alpha-beta cost model of the allreduce algorithms, per link class (inside a node, between
// nodes): t = steps x alpha + bytes / beta on the slowest link a step uses. It explains the
// choice between a flat ring, the 2D torus and a latency-optimal recursive doubling, and
// reproduces the step counts of Mikami et al. (3456 ranks as a 4 x 864 grid: 1732 latency steps
// against 6910 for a flat ring). Pure arithmetic; `gfshim-info --model` prints it.
//
// Assumptions: ranks are numbered node by node, so a flat ring crosses each node's NIC once per
// step with N/p bytes; the X column rings of the torus share their node's NIC, each moving
// N/(XY) bytes per step; recursive doubling moves the whole buffer in each of its ceil(log2 p)
// steps, most of them across nodes.
#pragma once

#include <cstdint>

namespace gfshim {

struct LinkCost {
  double latencySeconds = 0;  // alpha, per message
  double bytesPerSecond = 1;  // beta, of one link (a node's NIC between nodes)
};

struct ClusterShape {
  int64_t ranksPerNode = 1;  // X
  int64_t nodes = 1;         // Y
  LinkCost intraNode;
  LinkCost interNode;
};

struct AlgorithmCost {
  int64_t latencySteps = 0;
  double seconds = 0;
};

AlgorithmCost ringCost(const ClusterShape& shape, double bytes);
AlgorithmCost torusCost(const ClusterShape& shape, double bytes);
AlgorithmCost recursiveDoublingCost(const ClusterShape& shape, double bytes);

}  // namespace gfshim
