// CSC building blocks without ranks: chunk arithmetic, norms, selection order, packing, the
// residual store, and the composed call over a one-rank dense stand-in (so recv + residual must
// equal residual + send exactly).
#include "compress/csc.h"
#include "engine/lossy_allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gfshim {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<uint32_t> select(const std::vector<float>& norms, size_t k) {
  std::vector<uint32_t> selected;
  selectTopChunks(norms.data(), norms.size(), k, &selected);
  return selected;
}

TEST(CscChunks, CountsAndLengthsWithShortLastChunk) {
  EXPECT_EQ(cscChunkCount(0, 4), 0u);
  EXPECT_EQ(cscChunkCount(1, 4), 1u);
  EXPECT_EQ(cscChunkCount(8, 4), 2u);
  EXPECT_EQ(cscChunkCount(9, 4), 3u);
  EXPECT_EQ(cscChunkLength(9, 4, 0), 4u);
  EXPECT_EQ(cscChunkLength(9, 4, 2), 1u);
  EXPECT_EQ(cscChunkLength(9, 4, 3), 0u);
  EXPECT_EQ(cscChunkLength(8, 4, 1), 4u);
}

TEST(CscChunks, SelectedCountRoundsUpAndClamps) {
  EXPECT_EQ(cscSelectedCount(0, 0.5), 0u);
  EXPECT_EQ(cscSelectedCount(10, 0.01), 1u);  // clamped up to one chunk
  EXPECT_EQ(cscSelectedCount(10, 0.1), 1u);
  EXPECT_EQ(cscSelectedCount(10, 0.11), 2u);
  EXPECT_EQ(cscSelectedCount(10, 1.0), 10u);
  EXPECT_EQ(cscSelectedCount(10, 3.0), 10u);
  EXPECT_EQ(cscSelectedCount(10, 0.0), 1u);
  EXPECT_EQ(cscSelectedCount(10, kNan), 10u);
  EXPECT_EQ(cscSelectedCount(16384, 0.01), 164u);  // 163.84
  EXPECT_EQ(cscSelectedCount(100, 0.07), 7u);      // 7.000000000000001 in double
  EXPECT_EQ(cscSelectedCount(3, 1.0 / 3.0), 1u);
  EXPECT_EQ(cscSelectedCount(1, 0.5), 1u);
}

TEST(CscNorms, ShortLastChunkAndEmptyBuffer) {
  const std::vector<float> data = {1, -2, 3, -4, 5, 6, -7, 8, -0.5f, 0.25f};
  std::vector<float> norms(3, -1.0f);
  chunkL1Norms(data.data(), data.size(), 4, norms.data());
  EXPECT_EQ(norms, (std::vector<float>{10, 26, 0.75f}));

  float untouched = -1.0f;
  chunkL1Norms(nullptr, 0, 4, &untouched);
  EXPECT_EQ(untouched, -1.0f);

  // A chunk longer than the 16 lanes, with a remainder, integer-valued so the sum is exact.
  std::vector<float> ramp(4096 + 37);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = (i % 2 ? -1.0f : 1.0f) * float(i % 100);
  norms.assign(2, 0);
  chunkL1Norms(ramp.data(), ramp.size(), 4096, norms.data());
  for (size_t c = 0; c < 2; ++c) {
    double expected = 0;
    for (size_t i = c * 4096; i < std::min(ramp.size(), (c + 1) * 4096); ++i)
      expected += std::fabs(ramp[i]);
    EXPECT_EQ(norms[c], static_cast<float>(expected)) << c;
  }
}

TEST(CscNorms, RandomDataMatchesDoubleReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  for (size_t chunk : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4096}}) {
    std::vector<float> data(chunk * 5 + 3);
    for (float& x : data) x = value(rng);
    std::vector<float> norms(cscChunkCount(data.size(), chunk));
    chunkL1Norms(data.data(), data.size(), chunk, norms.data());
    for (size_t c = 0; c < norms.size(); ++c) {
      double expected = 0;
      for (size_t i = 0; i < cscChunkLength(data.size(), chunk, c); ++i)
        expected += std::fabs(data[c * chunk + i]);
      EXPECT_NEAR(norms[c], expected, 1e-5 * expected) << "chunk " << chunk << " c " << c;
    }
  }
}

TEST(CscNorms, FusedAddGivesTheBitsOfTheSeparatePasses) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const size_t count = 3 * 1000 + 123;
  std::vector<float> residual(count), send(count);
  for (size_t i = 0; i < count; ++i) {
    residual[i] = value(rng);
    send[i] = value(rng) * 1e3f;
  }
  std::vector<float> expectedResidual(count);
  for (size_t i = 0; i < count; ++i) expectedResidual[i] = residual[i] + send[i];
  std::vector<float> expectedNorms(cscChunkCount(count, 1000)), norms(expectedNorms.size());
  chunkL1Norms(expectedResidual.data(), count, 1000, expectedNorms.data());

  addAndChunkL1Norms(residual.data(), send.data(), count, 1000, norms.data());
  EXPECT_EQ(std::memcmp(residual.data(), expectedResidual.data(), count * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(norms.data(), expectedNorms.data(), norms.size() * sizeof(float)), 0);
}

TEST(CscNorms, NanAndInfReachTheNorm) {
  std::vector<float> data = {1, 2, kNan, 3, 1, -kInf, 2, 2};
  std::vector<float> norms(3);
  chunkL1Norms(data.data(), data.size(), 3, norms.data());
  EXPECT_TRUE(std::isnan(norms[0]));
  EXPECT_EQ(norms[1], kInf);
  EXPECT_EQ(norms[2], 4.0f);
}

TEST(CscSelect, TiesGoToTheLowerIndex) {
  const std::vector<float> norms = {1, 3, 3, 2, 3};
  EXPECT_EQ(select(norms, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(select(norms, 2), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(select(norms, 3), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(select(norms, 4), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(select(std::vector<float>(6, 0.0f), 2), (std::vector<uint32_t>{0, 1}));
}

TEST(CscSelect, NanRanksFirstThenInfThenLargest) {
  const std::vector<float> norms = {1, kNan, kInf, 5, kNan, 0};
  EXPECT_EQ(select(norms, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(select(norms, 2), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(select(norms, 3), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(select(norms, 4), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(select(norms, 5), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(CscSelect, ZeroOneAndAllChunks) {
  const std::vector<float> norms = {4, 9, 1, 9.5f, 2};
  EXPECT_TRUE(select(norms, 0).empty());
  EXPECT_EQ(select(norms, 1), (std::vector<uint32_t>{3}));
  EXPECT_EQ(select(norms, 5), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(select(norms, 99), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(select({}, 3).empty());
}

TEST(CscSelect, MatchesAFullSortOnRandomNormsWithDuplicates) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(0, 20);
  std::vector<uint32_t> reused;  // capacity reused across calls, as the scratch is
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> norms(1 + static_cast<size_t>(rng() % 300));
    for (float& x : norms) {
      const int l = level(rng);
      x = l == 0 ? kNan : static_cast<float>(l);
    }
    std::vector<uint32_t> order(norms.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      if (std::isnan(norms[a]) != std::isnan(norms[b])) return std::isnan(norms[a]);
      return !std::isnan(norms[a]) && norms[a] > norms[b];
    });
    for (size_t k : {size_t{0}, size_t{1}, norms.size() / 3, norms.size() - 1, norms.size()}) {
      std::vector<uint32_t> expected(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
      std::sort(expected.begin(), expected.end());
      selectTopChunks(norms.data(), norms.size(), k, &reused);
      ASSERT_EQ(reused, expected) << "trial " << trial << " k " << k;
    }
  }
}

TEST(CscPack, RoundTripWithShortLastChunk) {
  const size_t count = 10;
  const size_t chunk = 4;  // chunks [0,4) [4,8) [8,10)
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(i + 1);
  for (const std::vector<uint32_t>& selected :
       {std::vector<uint32_t>{}, {2}, {0}, {1}, {0, 2}, {1, 2}, {0, 1, 2}}) {
    SCOPED_TRACE(testing::Message() << "selected " << testing::PrintToString(selected));
    std::vector<float> packed(count, -9.0f);
    const size_t n =
        cscPack(data.data(), count, chunk, selected.data(), selected.size(), packed.data());
    size_t expectedN = 0;
    for (uint32_t c : selected) expectedN += cscChunkLength(count, chunk, c);
    ASSERT_EQ(n, expectedN);
    std::vector<float> recv(count, -7.0f);
    ASSERT_EQ(cscUnpack(packed.data(), count, chunk, selected.data(), selected.size(), recv.data()),
              n);
    std::vector<float> cleared = data;
    cscClearChunks(cleared.data(), count, chunk, selected.data(), selected.size());
    for (size_t i = 0; i < count; ++i) {
      const bool chosen = std::count(selected.begin(), selected.end(), i / chunk) > 0;
      EXPECT_EQ(recv[i], chosen ? data[i] : 0.0f) << i;
      EXPECT_EQ(cleared[i], chosen ? 0.0f : data[i]) << i;
      EXPECT_EQ(recv[i] + cleared[i], data[i]) << i;
    }
  }
}

TEST(CscResidualStore, CreatesZeroedEntriesAndFindsThemAgain) {
  CscResidualStore store(1 << 20);
  CscResidual* a = store.findOrCreate(1, 0x1000, 100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->count, 100u);
  EXPECT_EQ(a->callsSeen, 0);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(a->data()[i], 0.0f);
  a->data()[5] = 3.0f;
  a->callsSeen = 4;
  EXPECT_EQ(store.findOrCreate(1, 0x1000, 100), a);
  EXPECT_EQ(a->data()[5], 3.0f);
  EXPECT_NE(store.findOrCreate(2, 0x1000, 100), a);  // other communicator
  EXPECT_NE(store.findOrCreate(1, 0x2000, 100), a);  // other buffer
  EXPECT_EQ(store.entryCount(), 3u);
  EXPECT_EQ(store.bytesHeld(), 3 * 100 * sizeof(float));
  ASSERT_NE(store.findOrCreate(1, 0x3000, 0), nullptr);  // empty buffers hold nothing
  EXPECT_EQ(store.bytesHeld(), 3 * 100 * sizeof(float));
}

TEST(CscResidualStore, CapRefusesNewEntriesButKeepsExistingOnes) {
  CscResidualStore store(100);
  CscResidual* big = store.findOrCreate(1, 0x10, 20);  // 80 bytes
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(store.findOrCreate(1, 0x20, 10), nullptr);  // 120 > 100
  EXPECT_EQ(store.entryCount(), 1u);
  ASSERT_NE(store.findOrCreate(1, 0x30, 5), nullptr);  // exactly 100
  EXPECT_EQ(store.bytesHeld(), 100u);
  EXPECT_EQ(store.findOrCreate(1, 0x40, 1), nullptr);
  EXPECT_EQ(store.findOrCreate(1, 0x10, 20), big);  // found, not created
  EXPECT_EQ(store.findOrCreate(1, 0x40, std::numeric_limits<size_t>::max()), nullptr);
  EXPECT_EQ(store.capBytes(), 100u);
}

TEST(CscResidualStore, AnotherCountAtTheSameAddressReplacesTheEntry) {
  CscResidualStore store(1000);
  CscResidual* old = store.findOrCreate(7, 0x100, 50);
  ASSERT_NE(old, nullptr);
  old->data()[0] = 1.0f;
  old->callsSeen = 9;
  CscResidual* reshaped = store.findOrCreate(7, 0x100, 60);
  ASSERT_NE(reshaped, nullptr);
  EXPECT_EQ(reshaped->count, 60u);
  EXPECT_EQ(reshaped->callsSeen, 0);
  EXPECT_EQ(reshaped->data()[0], 0.0f);
  EXPECT_EQ(store.entryCount(), 1u);
  EXPECT_EQ(store.bytesHeld(), 60 * sizeof(float));
  // The stale shape is dropped even when the new one does not fit.
  EXPECT_EQ(store.findOrCreate(7, 0x100, 1000), nullptr);
  EXPECT_EQ(store.entryCount(), 0u);
  EXPECT_EQ(store.bytesHeld(), 0u);
}

TEST(CscResidualStore, DropCommDropsOnlyThatCommunicator) {
  CscResidualStore store(1 << 20);
  for (uint64_t comm : {uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    for (uintptr_t address : {uintptr_t{0}, uintptr_t{0x10}, ~uintptr_t{0}}) {
      ASSERT_NE(store.findOrCreate(comm, address, 10 * comm), nullptr);
    }
  }
  store.dropComm(2);
  EXPECT_EQ(store.entryCount(), 6u);
  EXPECT_EQ(store.bytesHeld(), 3 * (10 + 30) * sizeof(float));
  store.dropComm(2);  // nothing left to drop
  store.dropComm(99);
  EXPECT_EQ(store.entryCount(), 6u);
  CscResidual* fresh = store.findOrCreate(2, 0x10, 20);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->callsSeen, 0);
  store.dropComm(1);
  store.dropComm(3);
  store.dropComm(2);
  EXPECT_EQ(store.entryCount(), 0u);
  EXPECT_EQ(store.bytesHeld(), 0u);
}

// One rank: both allreduces are the identity (copies), with an optional failure.
class OneRankDense : public CscDense {
 public:
  Status agreeDense(bool wantDense, bool* anyDense) override {
    *anyDense = wantDense;
    return Status::ok();
  }
  Status allreduceNorms(float*, size_t) override {
    ++normCalls;
    return failNorms ? Status::error(StatusCode::kTransportError, "norms") : Status::ok();
  }
  Status allreduceValues(const float* packed, float* summed, size_t n) override {
    ++valueCalls;
    lastValues = n;
    if (failValues) return Status::error(StatusCode::kTransportError, "values");
    if (packed != summed && n > 0) std::memmove(summed, packed, n * sizeof(float));
    return Status::ok();
  }
  int normCalls = 0;
  int valueCalls = 0;
  size_t lastValues = 0;
  bool failNorms = false;
  bool failValues = false;
};

// One rank's CSC state for a buffer of `count` elements: its residual entry, the one-rank
// collectives and the scratch.
struct OneRankCsc {
  explicit OneRankCsc(size_t count, int arrays = 1)
      : store(1 << 20, arrays), entry(store.findOrCreate(1, 0x1, count)) {}
  Status run(const CscParams& params, const float* send, float* recv, size_t count,
             CscOutcome* outcome = nullptr) {
    return cscAllreduce(params, entry, send, recv, count, dense, scratch, outcome);
  }
  CscResidualStore store;
  CscResidual* entry;
  OneRankDense dense;
  CscScratch scratch;
};

TEST(CscAllreduce, NoEntryIsOneDenseCall) {
  OneRankDense dense;
  CscScratch scratch;
  CscOutcome outcome;
  std::vector<float> send = {1, 2, 3}, recv(3);
  ASSERT_TRUE(
      cscAllreduce(CscParams{}, nullptr, send.data(), recv.data(), 3, dense, scratch, &outcome)
          .isOk());
  EXPECT_EQ(outcome.mode, CscMode::kDenseNoEntry);
  EXPECT_EQ(outcome.elementsSent, 3u);
  EXPECT_EQ(dense.normCalls, 0);
  EXPECT_EQ(recv, send);
}

TEST(CscAllreduce, WarmupThenSparseDeliversOrKeepsEveryElement) {
  const size_t count = 1000;
  const CscParams params{0.2, 64, 2};  // 16 chunks, the last of 40; 4 selected
  OneRankCsc csc(count);
  ASSERT_NE(csc.entry, nullptr);
  CscResidual* entry = csc.entry;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int call = 0; call < 6; ++call) {
    std::vector<float> send(count), recv(count, -5.0f);
    for (size_t i = 0; i < count; ++i) send[i] = value(rng) * float(1 + (i / 64) % 5);
    const std::vector<float> before(entry->data(), entry->data() + count);
    CscOutcome outcome;
    ASSERT_TRUE(csc.run(params, send.data(), recv.data(), count, &outcome).isOk());
    EXPECT_EQ(entry->callsSeen, call + 1);
    if (call < 2) {
      EXPECT_EQ(outcome.mode, CscMode::kDenseWarmup);
      EXPECT_EQ(outcome.elementsSent, count);
      EXPECT_EQ(recv, send);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(entry->data()[i], 0.0f);
      continue;
    }
    EXPECT_EQ(outcome.mode, CscMode::kSparse);
    EXPECT_EQ(outcome.chunks, 16u);
    EXPECT_EQ(outcome.selectedChunks, 4u);
    EXPECT_EQ(outcome.normsSent, 16u);
    EXPECT_EQ(outcome.elementsSent, csc.dense.lastValues);
    EXPECT_LE(outcome.elementsSent, 4u * 64);
    const std::vector<uint32_t>& selected = csc.scratch.selected;
    ASSERT_EQ(selected.size(), 4u);
    for (size_t i = 0; i < count; ++i) {
      const float g = before[i] + send[i];
      const bool chosen =
          std::binary_search(selected.begin(), selected.end(), static_cast<uint32_t>(i / 64));
      ASSERT_EQ(recv[i], chosen ? g : 0.0f) << "call " << call << " element " << i;
      ASSERT_EQ(entry->data()[i], chosen ? 0.0f : g) << "call " << call << " element " << i;
    }
  }
}

TEST(CscAllreduce, InPlaceReadsSendBeforeWritingRecv) {
  const size_t count = 300;
  OneRankCsc csc(count);
  std::vector<float> buffer(count);
  for (size_t i = 0; i < count; ++i) buffer[i] = float(i % 7) - 3.0f + (i >= 200 ? 100.0f : 0);
  const std::vector<float> send = buffer;
  ASSERT_TRUE(csc.run(CscParams{0.3, 100, 0}, buffer.data(), buffer.data(), count).isOk());
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(buffer[i], i >= 200 ? send[i] : 0.0f) << i;
    EXPECT_EQ(csc.entry->data()[i], i >= 200 ? 0.0f : send[i]) << i;
  }
}

TEST(CscAllreduce, NanChunkIsDeliveredAndLeavesNoNanBehind) {
  const size_t count = 40;
  OneRankCsc csc(count);
  std::vector<float> send(count, 1000.0f), recv(count);
  for (size_t i = 30; i < 40; ++i) send[i] = i == 33 ? kNan : 0.0f;  // chunk 3, else smallest
  ASSERT_TRUE(csc.run(CscParams{0.25, 10, 0}, send.data(), recv.data(), count).isOk());
  EXPECT_EQ(csc.scratch.selected, (std::vector<uint32_t>{3}));
  EXPECT_TRUE(std::isnan(recv[33]));
  for (size_t i = 0; i < count; ++i) EXPECT_FALSE(std::isnan(csc.entry->data()[i])) << i;
}

TEST(CscAllreduce, BadParametersLeaveTheEntryUntouched) {
  OneRankCsc csc(8);
  std::vector<float> send(8, 1.0f), recv(8);
  EXPECT_EQ(csc.run(CscParams{0.5, 0, 0}, send.data(), recv.data(), 8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(csc.run(CscParams{0.0, 4, 0}, send.data(), recv.data(), 8).code(),
            StatusCode::kInvalidArgument);
  CscParams decayTooLarge{0.5, 4, 0};
  decayTooLarge.momentum = 0.5f;
  decayTooLarge.momentumDecay = 1.5f;  // a fraction dropped: at most 1
  EXPECT_EQ(csc.run(decayTooLarge, send.data(), recv.data(), 8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(csc.run(CscParams{0.5, 4, 0}, send.data(), recv.data(), 7).code(),
            StatusCode::kInternal);
  EXPECT_EQ(csc.dense.normCalls + csc.dense.valueCalls, 0);
  EXPECT_EQ(csc.entry->callsSeen, 0);
}

TEST(CscAllreduce, FailedCollectiveResetsTheEntry) {
  for (bool failNorms : {true, false}) {
    OneRankCsc csc(8);
    std::vector<float> send(8, 1.0f), recv(8);
    send[0] = 5.0f;
    ASSERT_TRUE(csc.run(CscParams{0.5, 4, 0}, send.data(), recv.data(), 8).isOk());
    ASSERT_EQ(csc.entry->data()[4], 1.0f);  // chunk 1 kept
    csc.dense.failNorms = failNorms;
    csc.dense.failValues = !failNorms;
    EXPECT_EQ(csc.run(CscParams{0.5, 4, 0}, send.data(), recv.data(), 8).code(),
              StatusCode::kTransportError);
    EXPECT_EQ(csc.entry->callsSeen, 0);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(csc.entry->data()[i], 0.0f) << i;
  }
}

TEST(CscAllreduce, EmptyBufferSendsNothing) {
  OneRankCsc csc(0);
  CscOutcome outcome;
  ASSERT_TRUE(csc.run(CscParams{0.1, 4, 0}, nullptr, nullptr, 0, &outcome).isOk());
  EXPECT_EQ(outcome.mode, CscMode::kSparse);
  EXPECT_EQ(outcome.chunks, 0u);
  EXPECT_EQ(csc.dense.normCalls + csc.dense.valueCalls, 0);
}

// ---- Momentum correction (DGC) -----------------------------------------------------------------

TEST(CscMomentum, TheFusedPassIsTheRecurrenceAndItsNormsAreThoseOfTheAccumulation) {
  const size_t count = 100, chunk = 16;  // 7 chunks, the last of 4
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> residual(count), velocity(count), send(count);
  for (size_t i = 0; i < count; ++i) {
    residual[i] = value(rng);
    velocity[i] = value(rng);
    send[i] = value(rng);
  }
  for (const float decay : {0.0f, 0.75f, 1.0f}) {
    SCOPED_TRACE(testing::Message() << "decay " << decay);
    std::vector<float> wantResidual = residual, wantVelocity = velocity;
    for (size_t i = 0; i < count; ++i) {
      wantVelocity[i] = 0.9f * velocity[i] + send[i];
      wantResidual[i] = (1.0f - decay) * residual[i] + wantVelocity[i];
    }
    std::vector<float> norms(7), wantNorms(7);
    std::vector<float> accumulated = residual, accumulatedVelocity = velocity;
    std::vector<float> added = residual, addedVelocity = velocity;
    momentumAccumulate(accumulated.data(), accumulatedVelocity.data(), send.data(), count, 0.9f,
                       decay);
    momentumAddAndChunkL1Norms(added.data(), addedVelocity.data(), send.data(), count, chunk,
                               0.9f, decay, norms.data());
    chunkL1Norms(wantResidual.data(), count, chunk, wantNorms.data());
    EXPECT_EQ(addedVelocity, wantVelocity);
    EXPECT_EQ(added, wantResidual);
    EXPECT_EQ(accumulated, wantResidual);
    EXPECT_EQ(accumulatedVelocity, wantVelocity);
    EXPECT_EQ(std::memcmp(norms.data(), wantNorms.data(), sizeof(float) * 7), 0);
  }
}

TEST(CscMomentum, TheGradientOutputSubtractsTheLastDeliveryAndRemembersThisOne) {
  std::vector<float> recv = {1, 0, -2}, delivered = {10, 4, 0};
  momentumToGradient(recv.data(), delivered.data(), 3, 0.5f);
  EXPECT_EQ(recv, (std::vector<float>{-4, -2, -2}));
  EXPECT_EQ(delivered, (std::vector<float>{1, 0, -2}));
}

TEST(CscMomentum, EntriesKeepOneArrayPerStateAndTheCapCountsThemAll) {
  CscParams params;
  EXPECT_EQ(cscArraysPerElement(params), 1);
  params.momentum = 0.9f;
  params.momentumOutput = CscMomentumOutput::kUpdate;
  EXPECT_EQ(cscArraysPerElement(params), 2);
  params.momentumOutput = CscMomentumOutput::kGradient;
  EXPECT_EQ(cscArraysPerElement(params), 3);
  CscResidualStore store(3 * 100 * sizeof(float), 3);
  CscResidual* entry = store.findOrCreate(1, 0x1, 100);
  ASSERT_NE(entry, nullptr);
  ASSERT_NE(entry->velocity, nullptr);
  ASSERT_NE(entry->delivered, nullptr);
  EXPECT_EQ(entry->velocity[99], 0.0f);
  EXPECT_EQ(store.bytesHeld(), 3 * 100 * sizeof(float));
  EXPECT_EQ(store.findOrCreate(1, 0x2, 1), nullptr);  // the cap holds three arrays
}

CscParams momentumParams(double density, size_t chunk, int64_t warmup, CscMomentumOutput output) {
  CscParams params{density, chunk, warmup};
  params.momentum = 0.9f;
  params.momentumOutput = output;
  return params;
}

// Inputs whose chunk importance moves between calls, so selections change.
std::vector<float> movingInput(std::mt19937& rng, size_t count, size_t chunk) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-2, 1);
  std::vector<float> scale(cscChunkCount(count, chunk));
  for (float& s : scale) s = std::pow(10.0f, static_cast<float>(exponent(rng)));
  std::vector<float> send(count);
  for (size_t i = 0; i < count; ++i) send[i] = value(rng) * scale[i / chunk];
  return send;
}

// Momentum SGD with factor masking, per element in double: u = m u + g each call, reset to 0
// after a call that sent the element's chunk, and the accumulation v = (1 - d) v + u, delivered and
// reset when sent. Each call's output must be the reference's delivery and what is held its v; a
// sent chunk's velocity and accumulation are zero right after (a call that forgot the masking
// fails here). With d = 0 (DGC) what was sent plus what is held is the sum of the u's, and
// elements never sent hold exactly plain momentum SGD's update; with d > 0 a call that ignored
// the decay fails.
void expectMaskedMomentumSgd(float decay) {
  SCOPED_TRACE(testing::Message() << "decay " << decay);
  const size_t count = 500, chunk = 25;  // 20 chunks, 3 sent per call
  CscParams params = momentumParams(0.15, chunk, 2, CscMomentumOutput::kUpdate);
  params.momentumDecay = decay;
  OneRankCsc csc(count, cscArraysPerElement(params));
  ASSERT_NE(csc.entry, nullptr);
  std::mt19937 rng(11);
  std::vector<double> u(count, 0), v(count, 0), updates(count, 0), delivered(count, 0);
  std::vector<char> everSent(count, 0);
  for (int call = 0; call < 12; ++call) {
    SCOPED_TRACE(testing::Message() << "call " << call);
    const std::vector<float> send = movingInput(rng, count, chunk);
    std::vector<float> recv(count, -7.0f);
    CscOutcome outcome;
    ASSERT_TRUE(csc.run(params, send.data(), recv.data(), count, &outcome).isOk());
    EXPECT_TRUE(outcome.momentumCorrected);
    const bool sparse = outcome.mode == CscMode::kSparse;
    EXPECT_EQ(sparse, call >= 2);
    std::vector<char> sent(count, sparse ? 0 : 1);
    if (sparse) {
      for (uint32_t c : csc.scratch.selected) {
        for (size_t i = c * chunk; i < std::min(count, (c + 1) * chunk); ++i) sent[i] = 1;
      }
    }
    for (size_t i = 0; i < count; ++i) {
      u[i] = 0.9 * u[i] + send[i];
      v[i] = (1.0 - decay) * v[i] + u[i];
      updates[i] += u[i];
      delivered[i] += recv[i];
      if (!sent[i]) {
        ASSERT_EQ(recv[i], 0.0f) << i;
      } else {
        ASSERT_NEAR(recv[i], v[i], 1e-4 * (1 + std::fabs(v[i]))) << i;
        v[i] = 0;
      }
      ASSERT_NEAR(csc.entry->data()[i], v[i], 1e-4 * (1 + std::fabs(v[i]))) << i;
      if (sent[i] && sparse) {
        ASSERT_EQ(csc.entry->velocity[i], 0.0f) << i;
        ASSERT_EQ(csc.entry->data()[i], 0.0f) << i;
        u[i] = 0;  // the reference masks the same elements
        everSent[i] = 1;
      } else if (!sparse) {
        ASSERT_EQ(csc.entry->data()[i], 0.0f) << i;  // a dense call delivers everything
      } else {
        ASSERT_NE(csc.entry->velocity[i], 0.0f) << i;
      }
    }
  }
  size_t neverSent = 0;
  for (size_t i = 0; i < count; ++i) {
    const double held = csc.entry->data()[i];
    if (decay == 0.0f) {
      ASSERT_NEAR(delivered[i] + held, updates[i], 1e-4 * (1 + std::fabs(updates[i]))) << i;
    }
    neverSent += everSent[i] ? 0 : 1;
  }
  EXPECT_GT(neverSent, 0u);  // some chunks were held the whole time
}

TEST(CscMomentum, SentPlusHeldIsTheMaskedMomentumSgdUpdateAndMaskingClearsExactlyTheSentChunks) {
  expectMaskedMomentumSgd(0.0f);
}

TEST(CscMomentum, WithADecayTheHeldAccumulationShrinksEachCallAndTheDeliveryIsWhatIsLeft) {
  expectMaskedMomentumSgd(0.5f);
}

// An optimizer with its own momentum 0.9 applied to the gradient output ends with the velocity
// the update output hands to plain SGD, call after call, dense and sparse.
TEST(CscMomentum, TheOptimizersMomentumOverTheGradientOutputIsTheCorrectedUpdate) {
  const size_t count = 300, chunk = 10;
  const CscParams update = momentumParams(0.1, chunk, 3, CscMomentumOutput::kUpdate);
  const CscParams gradient = momentumParams(0.1, chunk, 3, CscMomentumOutput::kGradient);
  OneRankCsc forSgd(count, cscArraysPerElement(update));
  OneRankCsc forMomentumSgd(count, cscArraysPerElement(gradient));
  std::mt19937 rng(17);
  std::vector<double> optimizerVelocity(count, 0);
  for (int call = 0; call < 15; ++call) {
    SCOPED_TRACE(testing::Message() << "call " << call);
    const std::vector<float> send = movingInput(rng, count, chunk);
    std::vector<float> corrected(count), handedBack(count);
    ASSERT_TRUE(forSgd.run(update, send.data(), corrected.data(), count).isOk());
    ASSERT_TRUE(forMomentumSgd.run(gradient, send.data(), handedBack.data(), count).isOk());
    for (size_t i = 0; i < count; ++i) {
      optimizerVelocity[i] = 0.9 * optimizerVelocity[i] + handedBack[i];
      ASSERT_NEAR(optimizerVelocity[i], corrected[i], 1e-4 * (1 + std::fabs(corrected[i]))) << i;
      if (call < 3) {
        ASSERT_NEAR(handedBack[i], send[i], 1e-5 * (1 + std::fabs(send[i]))) << i;
      }
    }
  }
}

// A call too small to be sparse under the update output (CscParams::dense) runs dense past its
// warm-up, through its velocity: it hands back plain momentum SGD's update, call after call, and
// keeps the velocity (nothing is masked, since everything is sent).
TEST(CscMomentum, ADenseCallHandsBackMomentumSgdsUpdate) {
  const size_t count = 40, chunk = 8;
  CscParams params = momentumParams(0.1, chunk, 2, CscMomentumOutput::kUpdate);
  params.dense = true;
  OneRankCsc csc(count, cscArraysPerElement(params));
  ASSERT_NE(csc.entry, nullptr);
  std::mt19937 rng(23);
  std::vector<double> u(count, 0);
  for (int call = 0; call < 8; ++call) {
    SCOPED_TRACE(testing::Message() << "call " << call);
    const std::vector<float> send = movingInput(rng, count, chunk);
    std::vector<float> recv(count, -7.0f);
    CscOutcome outcome;
    ASSERT_TRUE(csc.run(params, send.data(), recv.data(), count, &outcome).isOk());
    EXPECT_EQ(outcome.mode, CscMode::kDenseAsked);
    EXPECT_TRUE(outcome.momentumCorrected);
    EXPECT_EQ(csc.dense.normCalls, 0);
    for (size_t i = 0; i < count; ++i) {
      u[i] = 0.9 * u[i] + send[i];
      ASSERT_NEAR(recv[i], u[i], 1e-5 * (1 + std::fabs(u[i]))) << i;
      ASSERT_EQ(csc.entry->data()[i], 0.0f) << i;
      ASSERT_EQ(csc.entry->velocity[i], recv[i]) << i;
    }
  }
}

TEST(CscMomentum, WithoutAnEntryTheCallIsThePlainDenseSum) {
  OneRankDense dense;
  CscScratch scratch;
  CscOutcome outcome;
  std::vector<float> send = {1, 2, 3}, recv(3);
  ASSERT_TRUE(cscAllreduce(momentumParams(0.5, 1, 0, CscMomentumOutput::kGradient), nullptr,
                           send.data(), recv.data(), 3, dense, scratch, &outcome)
                  .isOk());
  EXPECT_EQ(recv, send);
  EXPECT_FALSE(outcome.momentumCorrected);
}

TEST(CscMomentum, AFailedCallClearsTheVelocityAndTheDeliveredValuesToo) {
  const CscParams params = momentumParams(0.5, 4, 0, CscMomentumOutput::kGradient);
  OneRankCsc csc(8, cscArraysPerElement(params));
  std::vector<float> send(8, 1.0f), recv(8);
  send[0] = 5.0f;
  ASSERT_TRUE(csc.run(params, send.data(), recv.data(), 8).isOk());
  ASSERT_EQ(csc.entry->velocity[4], 1.0f);   // chunk 1 kept
  ASSERT_EQ(csc.entry->delivered[0], 5.0f);  // chunk 0 delivered
  csc.dense.failValues = true;
  EXPECT_FALSE(csc.run(params, send.data(), recv.data(), 8).isOk());
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(csc.entry->data()[i], 0.0f) << i;
    EXPECT_EQ(csc.entry->velocity[i], 0.0f) << i;
    EXPECT_EQ(csc.entry->delivered[i], 0.0f) << i;
  }
}


// DGC's local clipping: the factor brings the L2 norm down to the limit, never up; 0 is off.
TEST(CscClip, TheScaleBringsTheNormToTheLimitAndNeverRaisesIt) {
  const std::vector<float> values = {3, 4};  // norm 5
  EXPECT_FLOAT_EQ(clipScale(values.data(), 2, 2.5), 0.5f);
  EXPECT_EQ(clipScale(values.data(), 2, 5.0), 1.0f);
  EXPECT_EQ(clipScale(values.data(), 2, 100.0), 1.0f);
  EXPECT_EQ(clipScale(values.data(), 2, 0.0), 1.0f);
  EXPECT_EQ(clipScale(values.data(), 0, 1.0), 1.0f);
}

}  // namespace
}  // namespace gfshim
