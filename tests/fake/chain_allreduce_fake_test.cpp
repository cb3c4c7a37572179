// Threads as ranks: the reproducible mode's chain (algo/chain_allreduce.h) over the rendezvous
// fake transport. Data are random floats of mixed magnitudes, so the order of the additions shows
// in the bits: every rank must hold exactly ((x0 + x1) + x2) ... + x(p-1), for every segment size,
// in place or not, and whatever slice of a larger (fused) buffer the elements sit in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/execute.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

Plan chainPlan(uint64_t segmentBytes) {
  return enginePlan(Algo::kChain, Reason::kReproducibleChain, segmentBytes);
}

template <typename T>
std::vector<std::vector<T>> randomInputs(int p, size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<std::vector<T>> inputs(static_cast<size_t>(p), std::vector<T>(count));
  for (auto& rank : inputs) {
    for (T& x : rank) x = static_cast<T>(std::ldexp(mantissa(rng), exponent(rng)));
  }
  return inputs;
}

// The reference: rank order, left to right.
template <typename T>
std::vector<T> rankOrderedSum(const std::vector<std::vector<T>>& inputs) {
  std::vector<T> sum = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + inputs[r][i];
  }
  return sum;
}

template <typename T>
std::vector<std::vector<T>> runOnRanks(const Plan& plan, DType dtype,
                                       const std::vector<std::vector<T>>& inputs, bool inPlace) {
  const int p = static_cast<int>(inputs.size());
  const size_t count = inputs[0].size();
  std::vector<std::vector<T>> recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    recv[static_cast<size_t>(r)] =
        inPlace ? inputs[static_cast<size_t>(r)] : std::vector<T>(count, static_cast<T>(-7));
  }
  CallInfo call;
  call.count = static_cast<int64_t>(count);
  call.dtype = dtype;
  call.op = RedOp::kSum;
  call.inPlace = inPlace;
  FakeFabric fabric(p);
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    T* out = recv[static_cast<size_t>(r)].data();
    const T* in = inPlace ? out : inputs[static_cast<size_t>(r)].data();
    return executePlan(plan, call, transport, workspace, in, out);
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.isOk()) << s.message();
  return recv;
}

template <typename T>
void expectBitsEqual(const std::vector<T>& expected, const std::vector<T>& actual,
                     const char* what) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::memcmp(&expected[i], &actual[i], sizeof(T)), 0)
        << what << ": element " << i << " is " << actual[i] << ", rank order gives " << expected[i];
  }
}

TEST(ChainAllreduceFake, EveryRankHoldsTheRankOrderedSumForEverySegmentSize) {
  for (int p = 1; p <= 9; ++p) {
    const size_t q = static_cast<size_t>(p);
    for (size_t count : {size_t{0}, size_t{1}, q - 1, q + 1, size_t{1021}, size_t{30000}}) {
      const auto inputs = randomInputs<float>(p, count, static_cast<unsigned>(p * 7919 + count));
      const std::vector<float> expected = rankOrderedSum(inputs);
      for (uint64_t segmentBytes :
           {uint64_t{4}, uint64_t{100}, uint64_t{4096}, uint64_t{1} << 20}) {
        if (segmentBytes == 4 && count > 2000) continue;  // keeps the message count reasonable
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(testing::Message() << "p=" << p << " count=" << count
                                          << " segment=" << segmentBytes << " inPlace=" << inPlace);
          const auto recv = runOnRanks(chainPlan(segmentBytes), DType::kFloat32, inputs, inPlace);
          for (int r = 0; r < p; ++r) {
            ASSERT_NO_FATAL_FAILURE(
                expectBitsEqual(expected, recv[static_cast<size_t>(r)], "rank"));
          }
        }
      }
    }
  }
}

TEST(ChainAllreduceFake, DoublesToo) {
  const auto inputs = randomInputs<double>(5, 7777, 42);
  const auto recv = runOnRanks(chainPlan(1000), DType::kFloat64, inputs, false);
  for (const auto& rank : recv) expectBitsEqual(rankOrderedSum(inputs), rank, "double");
}

// Fusion boundaries: the same elements reduced as a slice of a larger buffer give the same bits.
TEST(ChainAllreduceFake, ASliceOfALargerBufferGivesTheSameBits) {
  const int p = 4;
  const auto whole = randomInputs<float>(p, 10000, 3);
  std::vector<std::vector<float>> slice(p);
  for (int r = 0; r < p; ++r) slice[r].assign(whole[r].begin() + 1234, whole[r].begin() + 5678);
  const auto fused = runOnRanks(chainPlan(4096), DType::kFloat32, whole, true);
  const auto alone = runOnRanks(chainPlan(300), DType::kFloat32, slice, false);
  for (int r = 0; r < p; ++r) {
    const std::vector<float> part(fused[r].begin() + 1234, fused[r].begin() + 5678);
    expectBitsEqual(part, alone[r], "slice");
  }
}

// The data above are order-sensitive: the ring (each chunk summed starting at another rank) does
// not reproduce the rank-ordered bits, so the checks above can tell the orders apart.
TEST(ChainAllreduceFake, TheRingSumsInAnotherOrderOnTheSameData) {
  const auto inputs = randomInputs<float>(4, 30000, 11);
  const auto recv = runOnRanks(enginePlan(Algo::kRing, Reason::kRingForced, 4096), DType::kFloat32,
                               inputs, false);
  const std::vector<float> expected = rankOrderedSum(inputs);
  EXPECT_NE(std::memcmp(expected.data(), recv[0].data(), expected.size() * sizeof(float)), 0);
}

// Each link carries the data once each way: rank 0 and rank p-1 send N bytes, the others 2N.
TEST(ChainAllreduceFake, EachLinkCarriesTheDataOnceEachWay) {
  const int p = 5;
  const size_t count = 5000;
  const auto inputs = randomInputs<float>(p, count, 5);
  CallInfo call;
  call.count = count;
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  FakeFabric fabric(p);
  std::vector<std::vector<float>> recv(p, std::vector<float>(count));
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    return executePlan(chainPlan(1024), call, transport, workspace, inputs[r].data(),
                       recv[r].data());
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (int r = 0; r < p; ++r) {
    const size_t expected = (r == 0 || r == p - 1 ? 1 : 2) * count * sizeof(float);
    EXPECT_EQ(fabric.bytesSent(r), expected) << "rank " << r;
  }
}

}  // namespace
}  // namespace gfshim
