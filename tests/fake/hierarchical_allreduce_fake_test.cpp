// Threads as ranks: the leader-based hierarchical allreduce (reduce along the node's chain to its
// leader, ring among the leaders, broadcast down the chain) over the rendezvous fake transport,
// for every grid from 1x1 to 5x5, several piece counts and awkward counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/execute.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

int32_t contribution(int rank, size_t i) {
  return (rank + 1) * 100003 - static_cast<int32_t>(i % 4099) * (rank % 3 + 1);
}

struct Layout {
  int x;  // ranks per node (row)
  int y;  // nodes (rows)
};

// Runs `plan` on every rank of an x by y grid, each rank's data in place in `data[rank]` or from
// `send[rank]` into `data[rank]`; returns each rank's status.
template <typename T>
std::vector<Status> runOnGrid(Layout layout, const Plan& plan, DType dtype, bool inPlace,
                              const std::vector<std::vector<T>>& send,
                              std::vector<std::vector<T>>& data, FakeFabric& fabric) {
  const int p = layout.x * layout.y;
  CallInfo call;
  call.count = static_cast<int64_t>(data[0].size());
  call.dtype = dtype;
  call.op = RedOp::kSum;
  call.inPlace = inPlace;
  return runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    const auto grid = torusGridFromDims(r, p, {layout.x, layout.y});
    T* out = data[static_cast<size_t>(r)].data();
    const T* in = inPlace ? out : send[static_cast<size_t>(r)].data();
    return executePlan(plan, call, transport, workspace, in, out, &*grid);
  });
}

void checkHierarchical(Layout layout, size_t count, uint64_t segmentBytes, size_t pieces,
                       bool inPlace) {
  SCOPED_TRACE(testing::Message() << layout.x << "x" << layout.y << " count=" << count
                                  << " segment=" << segmentBytes << " pieces=" << pieces
                                  << " inPlace=" << inPlace);
  const int p = layout.x * layout.y;
  FakeFabric fabric(p);
  std::vector<std::vector<int32_t>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& s = send[static_cast<size_t>(r)];
    s.resize(count);
    for (size_t i = 0; i < count; ++i) s[i] = contribution(r, i);
    recv[static_cast<size_t>(r)] = inPlace ? s : std::vector<int32_t>(count, -777);
  }
  Plan plan = enginePlan(Algo::kHierarchical, Reason::kHierarchicalOnForcedDims, segmentBytes);
  plan.torusPieces = pieces;
  const std::vector<Status> statuses =
      runOnGrid(layout, plan, DType::kInt32, inPlace, send, recv, fabric);
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < count; ++i) {
      int32_t expected = 0;
      for (int q = 0; q < p; ++q) expected += contribution(q, i);
      ASSERT_EQ(recv[static_cast<size_t>(r)][i], expected) << "rank " << r << " element " << i;
    }
  }
  // Legal peers only: inside a node, or between leaders (row position 0) of different nodes.
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      if (fabric.bytesSent(from, to) == 0) continue;
      const bool sameNode = from / layout.x == to / layout.x;
      const bool leaders = from % layout.x == 0 && to % layout.x == 0;
      ASSERT_TRUE(sameNode || leaders) << "rank " << from << " sent to " << to;
    }
  }
}

TEST(HierarchicalAllreduceFake, EveryGridUpTo5x5AndPieceCount) {
  for (int x = 1; x <= 5; ++x) {
    for (int y = 1; y <= 5; ++y) {
      const size_t p = static_cast<size_t>(x * y);
      for (size_t pieces : {size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
        for (size_t count : {size_t{0}, size_t{1}, p + 1, size_t{997}}) {
          checkHierarchical({x, y}, count, 1024, pieces, false);
        }
        checkHierarchical({x, y}, 1009, 64, pieces, true);
      }
    }
  }
  for (const Layout layout : {Layout{2, 2}, Layout{2, 4}, Layout{5, 3}}) {
    checkHierarchical(layout, 30011, 4096, 8, false);
  }
}

// Identical bits on every rank with inexact data, where different summation orders on different
// ranks would show: values with long fractions, so every reassociation changes the last bits.
TEST(HierarchicalAllreduceFake, InexactFloatsGiveIdenticalBitsOnEveryRank) {
  for (const Layout layout :
       {Layout{2, 2}, Layout{3, 2}, Layout{1, 5}, Layout{4, 3}, Layout{5, 1}}) {
    const int p = layout.x * layout.y;
    const size_t count = 4099;
    for (size_t pieces : {size_t{1}, size_t{4}}) {
      SCOPED_TRACE(testing::Message() << layout.x << "x" << layout.y << " pieces=" << pieces);
      FakeFabric fabric(p);
      std::vector<std::vector<float>> data = inexactFloatsPerRank(p, count);
      Plan plan = enginePlan(Algo::kHierarchical, Reason::kHierarchicalOnForcedDims, 512);
      plan.torusPieces = pieces;
      const std::vector<Status> statuses =
          runOnGrid(layout, plan, DType::kFloat32, true, data, data, fabric);
      ASSERT_NO_FATAL_FAILURE(expectIdenticalBitsOnEveryRank(statuses, data));
    }
  }
}

}  // namespace
}  // namespace gfshim
