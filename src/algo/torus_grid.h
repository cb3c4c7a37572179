// The 2D torus grid of Mikami et al. (arXiv 1811.05233): a row is the ranks of one node (X of
// them), a column is the i-th local rank of every node (Y nodes). Pure rank arithmetic.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gfshim {

struct TorusDims {
  int x = 0;  // ranks per row (per node)
  int y = 0;  // rows (nodes)
};

// How the torus's column pass (between nodes) reduces: a ring, 2(Y-1) steps, or Rabenseifner's
// recursive halving and doubling (algo/halving_doubling.h), about 2 log2 Y steps for the same
// bytes (2 more of the whole shard where Y is not a power of two), or, for Y = b * 2^a with b odd,
// a torus of its own (kRingThenHalving): a ring reduce-scatter among b consecutive nodes, halving
// and doubling of the ring's chunk among the 2^a nodes at stride b, a ring allgather; 2(b-1) +
// 2a steps and no fold, so the column's bytes stay 2(Y-1)/Y of the shard (columnSplit).
enum class TorusColumn { kRing, kHalvingDoubling, kRingThenHalving };

// The column of Y nodes as kRingThenHalving cuts it: Y = ringNodes * halvingNodes, ringNodes odd,
// halvingNodes a power of two (1 where Y is odd; ringNodes 1 where Y is a power of two).
struct ColumnSplit {
  int ringNodes = 1;
  int halvingNodes = 1;
};
ColumnSplit columnSplit(int y);

struct TorusGrid {
  TorusDims dims;
  std::vector<int> row;     // communicator ranks of this rank's row, in row order
  std::vector<int> column;  // communicator ranks of this rank's column, in column order
  int rowIndex = 0;         // this rank's position in `row`
  int columnIndex = 0;      // this rank's position in `column`
};

// A forced grid (GFSHIM_TORUS_DIMS): rank r sits in row r / X at position r % X.
// nullopt if X*Y differs from the communicator size.
std::optional<TorusGrid> torusGridFromDims(int rank, int size, TorusDims dims);

// The grid of a communicator from the node of every rank (nodeOfRank[r] identifies r's node).
// Rows are nodes ordered by their lowest rank, members ordered by rank. nullopt, with *why set,
// when nodes hold different numbers of ranks.
std::optional<TorusGrid> torusGridFromNodes(int rank, const std::vector<int>& nodeOfRank,
                                            std::string* why);

}  // namespace gfshim
