// Threads as ranks: the 2D torus (row reduce-scatter, column allreduce, row allgather) over the
// rendezvous fake transport, for every grid from 1x1 to 5x5 and awkward counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/execute.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 5 + static_cast<int>(i % 997));
}

// Every rank of the x-by-y grid reduces its own vector of `data` in place through `plan`.
std::vector<Status> runTorusInPlace(FakeFabric& fabric, const Plan& plan, int x, int y,
                                    std::vector<std::vector<float>>& data) {
  CallInfo call;
  call.count = static_cast<int64_t>(data.front().size());
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.inPlace = true;
  return runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    const auto grid = torusGridFromDims(r, x * y, {x, y});
    float* buffer = data[static_cast<size_t>(r)].data();
    return executePlan(plan, call, transport, workspace, buffer, buffer, &*grid);
  });
}

void checkTorus(int x, int y, size_t count, uint64_t segmentBytes, bool inPlace, size_t pieces = 1,
                TorusColumn column = TorusColumn::kRing) {
  SCOPED_TRACE(testing::Message() << x << "x" << y << " count=" << count << " segment="
                                  << segmentBytes << " inPlace=" << inPlace << " pieces=" << pieces
                                  << " column=" << static_cast<int>(column));
  const int p = x * y;
  FakeFabric fabric(p);
  std::vector<std::vector<float>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& s = send[static_cast<size_t>(r)];
    s.resize(count);
    for (size_t i = 0; i < count; ++i) s[i] = contribution(r, i);
    recv[static_cast<size_t>(r)] = inPlace ? s : std::vector<float>(count, -777.0f);
  }
  Plan plan = enginePlan(Algo::kTorus2d, Reason::kTorusOnForcedDims, segmentBytes);
  plan.torusPieces = pieces;
  plan.torusColumn = column;
  CallInfo call;
  call.count = static_cast<int64_t>(count);
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  const std::vector<Status> statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    const auto grid = torusGridFromDims(r, p, {x, y});
    float* out = recv[static_cast<size_t>(r)].data();
    const float* in = inPlace ? out : send[static_cast<size_t>(r)].data();
    return executePlan(plan, call, transport, workspace, in, out, &*grid);
  });
  ASSERT_NO_FATAL_FAILURE(expectExactSumOnEveryRank(statuses, recv, count, contribution));
  // Legal peers only: every message stays inside a row or a column of the grid.
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      if (fabric.bytesSent(from, to) == 0) continue;
      const bool sameRow = from / x == to / x;
      const bool sameColumn = from % x == to % x;
      ASSERT_TRUE(sameRow || sameColumn) << "rank " << from << " sent to " << to;
    }
  }
}

TEST(TorusAllreduceFake, EveryGridUpTo5x5) {
  for (int x = 1; x <= 5; ++x) {
    for (int y = 1; y <= 5; ++y) {
      const size_t p = static_cast<size_t>(x * y);
      for (size_t count : {size_t{0}, size_t{1}, p - 1, p + 1, static_cast<size_t>(x) + 1,
                           size_t{997}, size_t{30011}}) {
        checkTorus(x, y, count, 4096, false);
      }
      checkTorus(x, y, 1009, 64, true);
    }
  }
}

// Pipelined: the phases of consecutive pieces overlap (a row lane and a column lane); more pieces
// than elements leaves some empty.
TEST(TorusAllreduceFake, PiecesOverlapOnEveryGridUpTo5x5) {
  for (int x = 1; x <= 5; ++x) {
    for (int y = 1; y <= 5; ++y) {
      const size_t p = static_cast<size_t>(x * y);
      for (size_t pieces : {size_t{2}, size_t{3}}) {
        for (size_t count : {size_t{0}, size_t{1}, p + 1, size_t{997}}) {
          checkTorus(x, y, count, 4096, false, pieces);
        }
      }
      checkTorus(x, y, 1009, 64, true, 7);
    }
  }
  for (const auto& [x, y] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{3, 5}}) {
    for (size_t pieces : {size_t{2}, size_t{8}}) checkTorus(x, y, 30011, 4096, false, pieces);
  }
}

// Columns by recursive halving and doubling (algo/halving_doubling.h), alone and pipelined: every
// column height from 1 to 7 (powers of two and folds) under rows of 1 to 4.
TEST(TorusAllreduceFake, HalvingColumnsOnEveryGridUpTo4x7) {
  for (int x = 1; x <= 4; ++x) {
    for (int y = 1; y <= 7; ++y) {
      const size_t p = static_cast<size_t>(x * y);
      for (size_t count : {size_t{0}, size_t{1}, p + 1, size_t{997}, size_t{30011}}) {
        checkTorus(x, y, count, 4096, false, 1, TorusColumn::kHalvingDoubling);
      }
      checkTorus(x, y, 1009, 64, true, 3, TorusColumn::kHalvingDoubling);
    }
  }
}

// Split columns (Y = b * 2^a: a ring among b consecutive nodes, then halving among 2^a): odd
// heights (all ring), powers of two (all halving) and the mixed ones, alone and pipelined.
TEST(TorusAllreduceFake, SplitColumnsOnHeightsWithAnOddFactor) {
  for (int x = 1; x <= 3; ++x) {
    for (int y : {1, 2, 3, 4, 5, 6, 10, 12, 18, 24}) {
      const size_t p = static_cast<size_t>(x * y);
      for (size_t count : {size_t{0}, size_t{1}, p + 1, size_t{997}, size_t{30011}}) {
        checkTorus(x, y, count, 4096, false, 1, TorusColumn::kRingThenHalving);
      }
      checkTorus(x, y, 1009, 64, true, 3, TorusColumn::kRingThenHalving);
    }
  }
}

// What the split saves: no rank sends a whole shard (the fold of halving columns on a height that
// is not a power of two). On one column of 12 (3 x 4) every rank sends at most the ring's
// 2(p-1)/p of the buffer, plus one element a step for uneven chunks; with halving columns the
// ranks that fold in send more.
TEST(TorusAllreduceFake, SplitColumnsSendNoMoreThanARingWhereHalvingFolds) {
  const int p = 12;
  const size_t count = 12000;
  auto mostSentByOneRank = [&](TorusColumn column) {
    FakeFabric fabric(p);
    std::vector<std::vector<float>> data(static_cast<size_t>(p), std::vector<float>(count));
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < count; ++i) data[static_cast<size_t>(r)][i] = contribution(r, i);
    }
    Plan plan = enginePlan(Algo::kTorus2d, Reason::kTorusOnForcedDims, 1 << 20);
    plan.torusColumn = column;
    const std::vector<Status> statuses = runTorusInPlace(fabric, plan, 1, p, data);
    EXPECT_NO_FATAL_FAILURE(expectExactSumOnEveryRank(statuses, data, count, contribution));
    uint64_t most = 0;
    for (int from = 0; from < p; ++from) {
      uint64_t sent = 0;
      for (int to = 0; to < p; ++to) sent += fabric.bytesSent(from, to);
      most = std::max(most, sent);
    }
    return most;
  };
  const uint64_t ringBytes = 2 * (p - 1) * count / p * sizeof(float);
  const uint64_t slack = 2 * p * sizeof(float);
  EXPECT_LE(mostSentByOneRank(TorusColumn::kRingThenHalving), ringBytes + slack);
  EXPECT_GT(mostSentByOneRank(TorusColumn::kHalvingDoubling), ringBytes + slack);
}

}  // namespace
}  // namespace gfshim

namespace gfshim {
namespace {

// Identical bits on every rank with inexact data, where different summation orders on different
// ranks would show: values with long fractions, so every reassociation changes the last bits.
TEST(TorusAllreduceFake, InexactFloatsGiveIdenticalBitsOnEveryRank) {
  for (const auto& [x, y] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{1, 5}, std::pair{4, 3},
                            std::pair{2, 6}, std::pair{1, 12}}) {
    const int p = x * y;
    const size_t count = 4099;
    for (const auto& [algo, pieces, column] :
         {std::tuple{Algo::kRing, size_t{1}, TorusColumn::kRing},
          std::tuple{Algo::kTorus2d, size_t{1}, TorusColumn::kRing},
          std::tuple{Algo::kTorus2d, size_t{4}, TorusColumn::kRing},
          std::tuple{Algo::kTorus2d, size_t{4}, TorusColumn::kHalvingDoubling},
          std::tuple{Algo::kTorus2d, size_t{4}, TorusColumn::kRingThenHalving}}) {
      SCOPED_TRACE(testing::Message() << x << "x" << y << " algo=" << static_cast<int>(algo)
                                      << " pieces=" << pieces
                                      << " column=" << static_cast<int>(column));
      FakeFabric fabric(p);
      std::vector<std::vector<float>> data = inexactFloatsPerRank(p, count);
      Plan plan;
      plan.route = Route::kEngine;
      plan.algo = algo;
      plan.segmentBytes = 512;
      plan.torusPieces = pieces;
      plan.torusColumn = column;
      const std::vector<Status> statuses = runTorusInPlace(fabric, plan, x, y, data);
      ASSERT_NO_FATAL_FAILURE(expectIdenticalBitsOnEveryRank(statuses, data));
    }
  }
}

}  // namespace
}  // namespace gfshim
