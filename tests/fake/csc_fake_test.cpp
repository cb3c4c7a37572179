// Threads as ranks: CSC over the real ring executor and the rendezvous fake transport, 20 calls
// of random data per run. Checks conservation (delivered + residuals == inputs), that every rank
// selects the same chunks and ends with the same bits, warm-up, density 1 and in place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "algo/ring_allreduce.h"
#include "compress/csc.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

constexpr uint64_t kSegmentBytes = 256;  // several segments per ring chunk

// CscDense over the ring executor, as the engine will supply it (without fp16).
class RingDense : public CscDense {
 public:
  explicit RingDense(Transport& transport) : transport_(transport) {}
  Status agreeDense(bool wantDense, bool* anyDense) override {
    float flag = wantDense ? 1.0f : 0.0f;
    GFSHIM_RETURN_IF_ERROR(sum(&flag, &flag, 1));
    *anyDense = flag > 0;
    return Status::ok();
  }
  Status allreduceNorms(float* norms, size_t chunks) override { return sum(norms, norms, chunks); }
  Status allreduceValues(const float* packed, float* summed, size_t n) override {
    return sum(packed, summed, n);
  }

 private:
  Status sum(const float* send, float* recv, size_t n) {
    const RingSchedule schedule(transport_.size(), transport_.rank(), n, sizeof(float),
                                kSegmentBytes);
    return runRing(schedule, RingPart::kAllreduce, cpuReduceFn(DType::kFloat32, RedOp::kSum),
                   transport_, workspace_, send, recv);
  }
  Transport& transport_;
  Workspace workspace_;
};

using Buffers = std::vector<std::vector<float>>;  // [rank][element]

// Inputs per call and rank: uniform [-1, 1] times a scale per (call, chunk) from 0.01 to 10, so
// chunks differ in importance and the importance moves between calls.
std::vector<Buffers> makeInputs(int p, size_t count, size_t chunkElements, int calls,
                                unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-2, 1);
  std::vector<Buffers> inputs(static_cast<size_t>(calls), Buffers(static_cast<size_t>(p)));
  for (Buffers& call : inputs) {
    std::vector<float> scale(cscChunkCount(count, chunkElements));
    for (float& s : scale) s = std::pow(10.0f, static_cast<float>(exponent(rng)));
    for (std::vector<float>& rank : call) {
      rank.resize(count);
      for (size_t i = 0; i < count; ++i) rank[i] = value(rng) * scale[i / chunkElements];
    }
  }
  return inputs;
}

struct CscRun {
  std::vector<Buffers> recv;                                 // [call][rank]
  std::vector<std::vector<std::vector<uint32_t>>> selected;  // [call][rank]
  std::vector<std::vector<CscOutcome>> outcomes;             // [call][rank]
  // [call][rank], after the call; char, not bool: ranks are threads, and vector<bool> packs
  // neighbouring ranks into one word, so their writes raced
  std::vector<std::vector<char>> residualZero;
  Buffers residual;  // [rank], after the last call
};

CscRun runCsc(int p, size_t count, const CscParams& params, const std::vector<Buffers>& inputs,
              bool inPlace) {
  const size_t calls = inputs.size();
  const size_t ranks = static_cast<size_t>(p);
  CscRun run;
  run.recv.assign(calls, Buffers(ranks));
  run.selected.assign(calls, std::vector<std::vector<uint32_t>>(ranks));
  run.outcomes.assign(calls, std::vector<CscOutcome>(ranks));
  run.residualZero.assign(calls, std::vector<char>(ranks));
  run.residual.resize(ranks);
  FakeFabric fabric(p);
  const auto statuses = runRanks(fabric, [&](int rank, Transport& transport) -> Status {
    const size_t r = static_cast<size_t>(rank);
    CscResidualStore store(size_t{1} << 30, cscArraysPerElement(params));
    CscScratch scratch;
    RingDense dense(transport);
    std::vector<float> sendBuffer(count), recvBuffer(count);
    CscResidual* entry =
        store.findOrCreate(1, reinterpret_cast<uintptr_t>(recvBuffer.data()), count);
    if (entry == nullptr) return Status::error(StatusCode::kOutOfMemory, "no entry");
    for (size_t k = 0; k < calls; ++k) {
      const std::vector<float>& input = inputs[k][r];
      recvBuffer.assign(count, -12345.0f);
      float* target = recvBuffer.data();
      const float* source = sendBuffer.data();
      if (inPlace) {
        recvBuffer = input;
        source = target;
      } else {
        sendBuffer = input;
      }
      GFSHIM_RETURN_IF_ERROR(
          cscAllreduce(params, entry, source, target, count, dense, scratch, &run.outcomes[k][r]));
      if (!inPlace && sendBuffer != input) {
        return Status::error(StatusCode::kInternal, "send buffer modified");
      }
      run.recv[k][r] = recvBuffer;
      run.selected[k][r] =
          run.outcomes[k][r].mode == CscMode::kSparse ? scratch.selected : std::vector<uint32_t>{};
      run.residualZero[k][r] =
          std::all_of(entry->data(), entry->data() + count, [](float x) { return x == 0.0f; });
    }
    run.residual[r].assign(entry->data(), entry->data() + count);
    return Status::ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.isOk()) << s.message();
  return run;
}

// Sum over calls of the delivered result plus sum over ranks of the residual left equals the
// sum of every input, per element, within the rounding of (calls + p) float additions.
void expectConservation(const CscRun& run, const std::vector<Buffers>& inputs, size_t count) {
  const size_t calls = inputs.size();
  const size_t p = run.residual.size();
  for (size_t i = 0; i < count; ++i) {
    double expected = 0, magnitude = 0, got = 0;
    for (size_t k = 0; k < calls; ++k) {
      for (size_t r = 0; r < p; ++r) {
        expected += inputs[k][r][i];
        magnitude += std::fabs(inputs[k][r][i]);
      }
      got += run.recv[k][0][i];
    }
    for (size_t r = 0; r < p; ++r) got += run.residual[r][i];
    const double tolerance = static_cast<double>(calls + p) * FLT_EPSILON * magnitude;
    ASSERT_NEAR(got, expected, tolerance) << "element " << i;
  }
}

// Every rank chose the same chunks and holds the same bits; unselected chunks are exactly 0.
void expectAgreement(const CscRun& run, size_t count, const CscParams& params) {
  const size_t p = run.residual.size();
  const size_t chunks = cscChunkCount(count, params.chunkElements);
  for (size_t k = 0; k < run.recv.size(); ++k) {
    SCOPED_TRACE(testing::Message() << "call " << k);
    for (size_t r = 1; r < p; ++r) {
      ASSERT_EQ(run.selected[k][r], run.selected[k][0]) << "rank " << r;
      ASSERT_EQ(std::memcmp(run.recv[k][r].data(), run.recv[k][0].data(), count * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0";
    }
    const CscOutcome& outcome = run.outcomes[k][0];
    if (outcome.mode != CscMode::kSparse) continue;
    const std::vector<uint32_t>& selected = run.selected[k][0];
    ASSERT_EQ(selected.size(), cscSelectedCount(chunks, params.density));
    ASSERT_EQ(outcome.selectedChunks, selected.size());
    ASSERT_TRUE(std::is_sorted(selected.begin(), selected.end()));
    size_t sent = 0;
    for (uint32_t c : selected) sent += cscChunkLength(count, params.chunkElements, c);
    ASSERT_EQ(outcome.elementsSent, sent);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t c = static_cast<uint32_t>(i / params.chunkElements);
      if (!std::binary_search(selected.begin(), selected.end(), c)) {
        ASSERT_EQ(run.recv[k][0][i], 0.0f) << "element " << i << " of an unselected chunk";
      }
    }
  }
}

TEST(CscFake, ConservesEveryInputOverTwentyCalls) {
  const size_t count = 1000;  // 16 chunks of 64, the last of 40
  for (int p = 2; p <= 6; ++p) {
    for (int64_t warmup : {int64_t{0}, int64_t{3}}) {
      for (double density : {0.1, 0.25, 0.6}) {
        SCOPED_TRACE(testing::Message()
                     << "p=" << p << " warmup=" << warmup << " density=" << density);
        const CscParams params{density, 64, warmup};
        const auto inputs = makeInputs(p, count, 64, 20, 100u + static_cast<unsigned>(p));
        const CscRun run = runCsc(p, count, params, inputs, false);
        ASSERT_NO_FATAL_FAILURE(expectConservation(run, inputs, count));
      }
    }
  }
}

TEST(CscFake, EveryRankSelectsTheSameChunksAndHoldsTheSameBits) {
  for (int p = 2; p <= 6; ++p) {
    for (size_t chunk : {size_t{1}, size_t{64}, size_t{333}}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " chunk=" << chunk);
      const size_t count = 1000;
      const CscParams params{0.2, chunk, 1};
      const auto inputs = makeInputs(p, count, chunk, 20, 200u + static_cast<unsigned>(p));
      const CscRun run = runCsc(p, count, params, inputs, false);
      ASSERT_NO_FATAL_FAILURE(expectAgreement(run, count, params));
    }
  }
}

TEST(CscFake, WarmupCallsAreDenseSums) {
  const int p = 4;
  const size_t ranks = 4;
  const size_t count = 777;
  const CscParams params{0.1, 50, 3};
  const auto inputs = makeInputs(p, count, 50, 5, 300);
  const CscRun run = runCsc(p, count, params, inputs, false);
  for (size_t k = 0; k < 5; ++k) {
    SCOPED_TRACE(testing::Message() << "call " << k);
    for (size_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(run.outcomes[k][r].mode, k < 3 ? CscMode::kDenseWarmup : CscMode::kSparse);
      EXPECT_EQ(run.residualZero[k][r], k < 3) << "rank " << r;
    }
    if (k >= 3) continue;
    EXPECT_EQ(run.outcomes[k][0].elementsSent, count);
    EXPECT_EQ(run.outcomes[k][0].normsSent, 0u);
    for (size_t i = 0; i < count; ++i) {
      double expected = 0, magnitude = 0;
      for (size_t r = 0; r < ranks; ++r) {
        expected += inputs[k][r][i];
        magnitude += std::fabs(inputs[k][r][i]);
      }
      ASSERT_NEAR(run.recv[k][0][i], expected, p * FLT_EPSILON * magnitude) << "element " << i;
    }
  }
  ASSERT_NO_FATAL_FAILURE(expectAgreement(run, count, params));
}

// Momentum correction over the ring: every rank selects the same chunks and holds the same bits,
// and what was delivered plus what all ranks hold equals the sum over ranks of their momentum SGD
// updates with factor masking (u = 0.9 u + g per rank, reset where the call sent the chunk).
TEST(CscFake, MomentumCorrectionAgreesOnEveryRankAndConservesTheMaskedUpdates) {
  const size_t count = 1000, chunk = 64;
  for (int p : {2, 3, 5}) {
    SCOPED_TRACE(testing::Message() << "p=" << p);
    CscParams params{0.2, chunk, 2};
    params.momentum = 0.9f;
    params.momentumOutput = CscMomentumOutput::kUpdate;
    const auto inputs = makeInputs(p, count, chunk, 12, 500u + static_cast<unsigned>(p));
    const CscRun run = runCsc(p, count, params, inputs, false);
    ASSERT_NO_FATAL_FAILURE(expectAgreement(run, count, params));
    const size_t ranks = static_cast<size_t>(p);
    std::vector<std::vector<double>> velocity(ranks, std::vector<double>(count, 0));
    std::vector<double> updates(count, 0), delivered(count, 0), magnitude(count, 0);
    for (size_t k = 0; k < inputs.size(); ++k) {
      for (size_t r = 0; r < ranks; ++r) {
        EXPECT_TRUE(run.outcomes[k][r].momentumCorrected);
        for (size_t i = 0; i < count; ++i) {
          velocity[r][i] = 0.9 * velocity[r][i] + inputs[k][r][i];
          updates[i] += velocity[r][i];
          magnitude[i] += std::fabs(velocity[r][i]);
        }
        for (uint32_t c : run.selected[k][r]) {
          for (size_t i = c * chunk; i < std::min(count, (c + 1) * chunk); ++i) velocity[r][i] = 0;
        }
      }
      for (size_t i = 0; i < count; ++i) delivered[i] += run.recv[k][0][i];
    }
    for (size_t i = 0; i < count; ++i) {
      double held = 0;
      for (size_t r = 0; r < ranks; ++r) held += run.residual[r][i];
      ASSERT_NEAR(delivered[i] + held, updates[i], 64 * FLT_EPSILON * magnitude[i]) << i;
    }
  }
}

TEST(CscFake, DensityOneEqualsTheDenseRing) {
  for (int p : {2, 3, 5}) {
    SCOPED_TRACE(testing::Message() << "p=" << p);
    const size_t count = 1001;
    const auto inputs = makeInputs(p, count, 64, 4, 400u + static_cast<unsigned>(p));
    const CscRun run = runCsc(p, count, CscParams{1.0, 64, 0}, inputs, false);
    for (size_t k = 0; k < inputs.size(); ++k) {
      Buffers dense(static_cast<size_t>(p), std::vector<float>(count));
      FakeFabric fabric(p);
      const auto statuses = runRanks(fabric, [&](int rank, Transport& transport) {
        RingDense ring(transport);
        const size_t r = static_cast<size_t>(rank);
        return ring.allreduceValues(inputs[k][r].data(), dense[r].data(), count);
      });
      for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
      for (size_t r = 0; r < static_cast<size_t>(p); ++r) {
        EXPECT_EQ(run.outcomes[k][r].mode, CscMode::kSparse);
        EXPECT_EQ(run.outcomes[k][r].selectedChunks, run.outcomes[k][r].chunks);
        EXPECT_TRUE(run.residualZero[k][r]);
        ASSERT_EQ(std::memcmp(run.recv[k][r].data(), dense[r].data(), count * sizeof(float)), 0)
            << "call " << k << " rank " << r;
      }
    }
  }
}

TEST(CscFake, InPlaceGivesTheBitsOfOutOfPlace) {
  for (int p : {2, 4, 6}) {
    SCOPED_TRACE(testing::Message() << "p=" << p);
    const size_t count = 1000;
    const CscParams params{0.15, 64, 2};
    const auto inputs = makeInputs(p, count, 64, 20, 500u + static_cast<unsigned>(p));
    const CscRun outOfPlace = runCsc(p, count, params, inputs, false);
    const CscRun inPlace = runCsc(p, count, params, inputs, true);
    ASSERT_NO_FATAL_FAILURE(expectConservation(inPlace, inputs, count));
    ASSERT_NO_FATAL_FAILURE(expectAgreement(inPlace, count, params));
    for (size_t k = 0; k < inputs.size(); ++k) {
      for (size_t r = 0; r < static_cast<size_t>(p); ++r) {
        ASSERT_EQ(inPlace.selected[k][r], outOfPlace.selected[k][r]);
        ASSERT_EQ(std::memcmp(inPlace.recv[k][r].data(), outOfPlace.recv[k][r].data(),
                              count * sizeof(float)),
                  0)
            << "call " << k << " rank " << r;
      }
    }
    for (size_t r = 0; r < static_cast<size_t>(p); ++r) {
      ASSERT_EQ(std::memcmp(inPlace.residual[r].data(), outOfPlace.residual[r].data(),
                            count * sizeof(float)),
                0);
    }
  }
}

TEST(CscFake, OneRankDeliversOrKeepsEveryElement) {
  const size_t count = 500;
  const auto inputs = makeInputs(1, count, 64, 20, 600);
  const CscRun run = runCsc(1, count, CscParams{0.3, 64, 0}, inputs, false);
  ASSERT_NO_FATAL_FAILURE(expectConservation(run, inputs, count));
}

}  // namespace
}  // namespace gfshim
