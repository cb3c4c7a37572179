// Threads as ranks: the real executor, schedule and reducers over the rendezvous fake transport,
// over a grid of rank counts x element counts x segment sizes, in place and not. Data are
// integer-valued so float sums are exact and can be compared with ==.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "algo/ring_schedule.h"
#include "engine/execute.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

Plan ringPlan(uint64_t segmentBytes) {
  return enginePlan(Algo::kRing, Reason::kRingForced, segmentBytes);
}

float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1021));
}

void checkFloatSum(int p, size_t count, uint64_t segmentBytes, bool inPlace) {
  SCOPED_TRACE(testing::Message() << "p=" << p << " count=" << count << " segment=" << segmentBytes
                                  << " inPlace=" << inPlace);
  FakeFabric fabric(p);
  std::vector<std::vector<float>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    send[static_cast<size_t>(r)].resize(count);
    for (size_t i = 0; i < count; ++i) send[static_cast<size_t>(r)][i] = contribution(r, i);
    recv[static_cast<size_t>(r)].assign(count, -12345.0f);  // poison, never zero
    if (inPlace) recv[static_cast<size_t>(r)] = send[static_cast<size_t>(r)];
  }
  CallInfo call;
  call.count = static_cast<int64_t>(count);
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.inPlace = inPlace;
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    float* out = recv[static_cast<size_t>(r)].data();
    const float* in = inPlace ? out : send[static_cast<size_t>(r)].data();
    return executePlan(ringPlan(segmentBytes), call, transport, workspace, in, out);
  });
  ASSERT_NO_FATAL_FAILURE(expectExactSumOnEveryRank(statuses, recv, count, contribution));
  if (!inPlace) {
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(send[static_cast<size_t>(r)][i], contribution(r, i)) << "send buffer modified";
    }
  }
  // Bandwidth optimality: rank r sends every chunk but r+1 in the reduce-scatter and every chunk
  // but r+2 in the allgather.
  for (int r = 0; r < p && p > 1; ++r) {
    const size_t skipped =
        ringChunk(count, p, (r + 1) % p).count + ringChunk(count, p, (r + 2) % p).count;
    ASSERT_EQ(fabric.bytesSent(r), (2 * count - skipped) * sizeof(float)) << "rank " << r;
  }
}

TEST(RingAllreduceFake, FloatSumOverRankAndCountGrid) {
  for (int p = 1; p <= 9; ++p) {
    const size_t q = static_cast<size_t>(p);
    for (size_t count :
         {size_t{0}, size_t{1}, q - 1, q, q + 1, size_t{13}, size_t{1021}, size_t{40000}}) {
      for (uint64_t segmentBytes :
           {uint64_t{4}, uint64_t{100}, uint64_t{4096}, uint64_t{1} << 20}) {
        if (segmentBytes == 4 && count > 2000) continue;  // keeps the message count reasonable
        checkFloatSum(p, count, segmentBytes, false);
        checkFloatSum(p, count, segmentBytes, true);
      }
    }
  }
}

TEST(RingAllreduceFake, LargeRankCounts) {
  for (int p : {13, 16, 17}) {
    checkFloatSum(p, 100003, 8192, false);
    checkFloatSum(p, static_cast<size_t>(p) - 1, 64, true);
  }
}

TEST(RingAllreduceFake, MinLocAcrossRanksPicksLowestIndexOnTies) {
  const int p = 5;
  const size_t count = 257;
  using P = ValueIndexPair<double>;
  FakeFabric fabric(p);
  std::vector<std::vector<P>> send(p), recv(p);
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < count; ++i) {
      // Value ties between ranks 1 and 3 on even elements; rank index as location.
      const double value =
          (i % 2 == 0 && (r == 1 || r == 3)) ? -1.0 : static_cast<double>((r * 7 + i) % 5);
      send[r].push_back({value, r});
    }
    recv[r].assign(count, P{99.0, -7});
  }
  CallInfo call;
  call.count = count;
  call.dtype = DType::kDoubleInt;
  call.op = RedOp::kMinLoc;
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    return executePlan(ringPlan(64), call, transport, workspace, send[r].data(), recv[r].data());
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t i = 0; i < count; ++i) {
    P best = send[0][i];
    for (int r = 1; r < p; ++r) {
      if (send[r][i].value < best.value) best = send[r][i];
    }
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(recv[r][i].value, best.value) << i;
      ASSERT_EQ(recv[r][i].index, best.index) << i;
    }
  }
}

TEST(RingAllreduceFake, IntegerMaxIsBitExact) {
  const int p = 6;
  const size_t count = 10007;
  FakeFabric fabric(p);
  std::vector<std::vector<int64_t>> data(p, std::vector<int64_t>(count));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < count; ++i)
      data[r][i] = static_cast<int64_t>((i * 2654435761u + r * 40503u) % 1000003) - 500000;
  }
  const auto original = data;
  CallInfo call;
  call.count = count;
  call.dtype = DType::kInt64;
  call.op = RedOp::kMax;
  call.inPlace = true;
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    return executePlan(ringPlan(1000), call, transport, workspace, data[r].data(), data[r].data());
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t i = 0; i < count; ++i) {
    int64_t expected = original[0][i];
    for (int r = 1; r < p; ++r) expected = std::max(expected, original[r][i]);
    for (int r = 0; r < p; ++r) ASSERT_EQ(data[r][i], expected);
  }
}

// The fake must catch a deadlocked schedule instead of hanging: a rank that never joins makes
// its neighbours time out with an error Status.
TEST(RingAllreduceFake, MissingRankTimesOutWithAnError) {
  FakeFabric fabric(3, std::chrono::milliseconds(200));
  std::vector<float> buffers[3] = {std::vector<float>(300, 1.0f), std::vector<float>(300, 1.0f),
                                   std::vector<float>(300, 1.0f)};
  CallInfo call;
  call.count = 300;
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.inPlace = true;
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    if (r == 2) return Status::ok();
    Workspace workspace;
    return executePlan(ringPlan(64), call, transport, workspace, buffers[r].data(),
                       buffers[r].data());
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kTimeout);
  EXPECT_EQ(statuses[1].code(), StatusCode::kTimeout);
}

}  // namespace
}  // namespace gfshim
