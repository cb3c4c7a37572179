#include "algo/torus_grid.h"

#include <map>

namespace gfshim {

ColumnSplit columnSplit(int y) {
  ColumnSplit split;
  split.ringNodes = y > 0 ? y : 1;
  while (split.ringNodes % 2 == 0) {
    split.ringNodes /= 2;
    split.halvingNodes *= 2;
  }
  return split;
}

std::optional<TorusGrid> torusGridFromDims(int rank, int size, TorusDims dims) {
  if (dims.x <= 0 || dims.y <= 0 || dims.x * dims.y != size || rank < 0 || rank >= size) {
    return std::nullopt;
  }
  TorusGrid grid;
  grid.dims = dims;
  const int node = rank / dims.x;
  const int local = rank % dims.x;
  for (int i = 0; i < dims.x; ++i) grid.row.push_back(node * dims.x + i);
  for (int j = 0; j < dims.y; ++j) grid.column.push_back(j * dims.x + local);
  grid.rowIndex = local;
  grid.columnIndex = node;
  return grid;
}

std::optional<TorusGrid> torusGridFromNodes(int rank, const std::vector<int>& nodeOfRank,
                                            std::string* why) {
  // Nodes in order of their lowest rank; members of each node in rank order.
  std::vector<std::vector<int>> nodes;
  std::map<int, size_t> nodeIndex;
  for (int r = 0; r < static_cast<int>(nodeOfRank.size()); ++r) {
    auto [it, inserted] = nodeIndex.emplace(nodeOfRank[static_cast<size_t>(r)], nodes.size());
    if (inserted) nodes.emplace_back();
    nodes[it->second].push_back(r);
  }
  if (nodes.empty() || rank < 0 || rank >= static_cast<int>(nodeOfRank.size())) {
    *why = "empty communicator";
    return std::nullopt;
  }
  const size_t perNode = nodes.front().size();
  for (const std::vector<int>& members : nodes) {
    if (members.size() != perNode) {
      *why = "nodes hold different numbers of ranks (" + std::to_string(perNode) + " and " +
             std::to_string(members.size()) + ")";
      return std::nullopt;
    }
  }
  TorusGrid grid;
  grid.dims = TorusDims{static_cast<int>(perNode), static_cast<int>(nodes.size())};
  const size_t myNode = nodeIndex.at(nodeOfRank[static_cast<size_t>(rank)]);
  grid.row = nodes[myNode];
  for (size_t i = 0; i < grid.row.size(); ++i) {
    if (grid.row[i] == rank) grid.rowIndex = static_cast<int>(i);
  }
  for (const std::vector<int>& members : nodes) {
    grid.column.push_back(members[static_cast<size_t>(grid.rowIndex)]);
  }
  grid.columnIndex = static_cast<int>(myNode);
  return grid;
}

}  // namespace gfshim
