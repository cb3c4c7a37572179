// Threads as ranks: the compressed (fp16/bf16 wire) ring and 2D torus over the rendezvous fake
// transport, over rank counts x element counts x segment sizes, both formats, in place and not.
// Every rank must hold identical bits; integer data with small partial sums must come out exact;
// random data must stay within the error bound derived in algo/compressed_ring.h, against a
// double-precision reference; and the wire must carry 16-bit values only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "algo/compressed_ring.h"
#include "algo/ring_schedule.h"
#include "algo/torus_allreduce.h"
#include "algo/torus_grid.h"
#include "compress/half_codec.h"
#include "fake/fake_transport.h"
#include "fake/thread_ranks.h"

namespace gfshim {
namespace {

using Buffers = std::vector<std::vector<float>>;

constexpr HalfFormat kFormats[] = {HalfFormat::kFp16, HalfFormat::kBf16};

struct CompressedRun {
  HalfFormat format = HalfFormat::kFp16;
  float scale = 1.0f;
  uint64_t segmentBytes = 4096;
  bool inPlace = false;
  TorusDims torus;  // x == 0: the plain ring over all ranks
  size_t torusPieces = 1;
};

// Runs one compressed allreduce of `inputs` (one vector per rank); returns every rank's result.
// Checks that every rank succeeded, holds identical bits, and (not in place) kept its input.
Buffers runCompressed(const Buffers& inputs, const CompressedRun& run, FakeFabric& fabric) {
  const int p = static_cast<int>(inputs.size());
  const size_t count = inputs[0].size();
  Buffers results(inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    results[r] = run.inPlace ? inputs[r] : std::vector<float>(count, -12345.0f);
  }
  const std::vector<Status> statuses = runRanks(fabric, [&](int r, Transport& transport) {
    Workspace workspace;
    float* out = results[static_cast<size_t>(r)].data();
    const float* in = run.inPlace ? out : inputs[static_cast<size_t>(r)].data();
    if (run.torus.x > 0) {
      const auto grid = torusGridFromDims(r, p, run.torus);
      return runCompressedTorusAllreduce(*grid, count, run.segmentBytes, run.torusPieces,
                                         run.format, run.scale, transport, workspace, in, out);
    }
    const RingSchedule schedule(p, r, count, sizeof(float), run.segmentBytes);
    return runCompressedRing(schedule, RingPart::kAllreduce, run.format, run.scale, transport,
                             workspace, in, out);
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.isOk()) << s.message();
  for (int r = 1; r < p && count > 0; ++r) {
    EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(),
                          count * sizeof(float)),
              0)
        << "rank " << r << " differs from rank 0";
  }
  return results;
}

double unitRoundoff(HalfFormat format) {
  return format == HalfFormat::kFp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// The bound of compressed_ring.h: `encodes` 16-bit roundings and `fp32Ops` fp32 roundings of
// values bounded by absSum, plus fp16's absolute error below its normal range.
double errorBound(HalfFormat format, int encodes, int fp32Ops, double absSum) {
  const double u = unitRoundoff(format);
  const double eps = std::ldexp(1.0, -24);
  const double eta = format == HalfFormat::kFp16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134);
  return (encodes * u + fp32Ops * eps) * absSum * std::pow(1.0 + u + eps, encodes) + encodes * eta;
}

// Every value the compressed allreduce returns is a 16-bit value: decoding its encoding gives it.
void expectSixteenBitValues(const std::vector<float>& result, HalfFormat format) {
  if (result.empty()) return;  // memcmp's pointers must not be null, even for 0 bytes (UBSan)
  std::vector<uint16_t> codes(result.size());
  std::vector<float> again(result.size());
  encodeHalf(format, result.data(), 1.0f, codes.data(), result.size());
  decodeHalf(format, codes.data(), again.data(), result.size());
  ASSERT_EQ(std::memcmp(result.data(), again.data(), result.size() * sizeof(float)), 0)
      << "a result is not a " << halfFormatName(format) << " value";
}

// Integer data whose partial sums stay exactly representable in the format for up to 8 ranks:
// |x| <= 255 (sums <= 2040 < 2048) for fp16, |x| <= 31 (sums <= 248 < 256) for bf16.
float integerContribution(HalfFormat format, int rank, size_t i) {
  const int range = format == HalfFormat::kFp16 ? 255 : 31;
  return static_cast<float>(static_cast<int>((static_cast<size_t>(rank) * 37 + i * 11) %
                                             static_cast<size_t>(2 * range + 1)) -
                            range);
}

Buffers integerInputs(HalfFormat format, int p, size_t count) {
  Buffers inputs(static_cast<size_t>(p), std::vector<float>(count));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < count; ++i)
      inputs[static_cast<size_t>(r)][i] = integerContribution(format, r, i);
  }
  return inputs;
}

Buffers randomInputs(int p, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  Buffers inputs(static_cast<size_t>(p), std::vector<float>(count));
  for (auto& in : inputs) {
    for (float& x : in) x = value(rng);
  }
  return inputs;
}

void checkExactIntegers(int p, size_t count, const CompressedRun& run) {
  SCOPED_TRACE(testing::Message() << halfFormatName(run.format) << " p=" << p << " count=" << count
                                  << " segment=" << run.segmentBytes << " inPlace=" << run.inPlace
                                  << " torus=" << run.torus.x << "x" << run.torus.y);
  FakeFabric fabric(p);
  const Buffers inputs = integerInputs(run.format, p, count);
  const Buffers results = runCompressed(inputs, run, fabric);
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < p; ++r) expected += inputs[static_cast<size_t>(r)][i];
    ASSERT_EQ(results[0][i], expected) << "element " << i;
  }
  if (run.torus.x == 0) {
    // Bandwidth: as runRing (every chunk but r+1, then every chunk but r+2), 2 bytes an element.
    for (int r = 0; r < p && p > 1; ++r) {
      const size_t skipped =
          ringChunk(count, p, (r + 1) % p).count + ringChunk(count, p, (r + 2) % p).count;
      ASSERT_EQ(fabric.bytesSent(r), (2 * count - skipped) * sizeof(uint16_t)) << "rank " << r;
    }
  } else {
    for (int from = 0; from < p; ++from) {
      for (int to = 0; to < p; ++to) {
        if (fabric.bytesSent(from, to) == 0) continue;
        const bool sameRow = from / run.torus.x == to / run.torus.x;
        const bool sameColumn = from % run.torus.x == to % run.torus.x;
        ASSERT_TRUE(sameRow || sameColumn) << "rank " << from << " sent to " << to;
      }
    }
  }
}

// Random data in [-1, 1], scale 1/p: within the bound, and 16-bit values.
void checkRandomWithinBound(int p, size_t count, const CompressedRun& run, int encodes,
                            int fp32Ops) {
  SCOPED_TRACE(testing::Message() << halfFormatName(run.format) << " p=" << p << " count=" << count
                                  << " segment=" << run.segmentBytes << " inPlace=" << run.inPlace
                                  << " torus=" << run.torus.x << "x" << run.torus.y);
  FakeFabric fabric(p);
  const Buffers inputs = randomInputs(p, count, static_cast<uint32_t>(p * 1000 + count));
  const Buffers results = runCompressed(inputs, run, fabric);
  double worstRatio = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, absSum = 0;
    for (int r = 0; r < p; ++r) {
      const double term =
          static_cast<double>(run.scale) * static_cast<double>(inputs[static_cast<size_t>(r)][i]);
      exact += term;
      absSum += std::fabs(term);
    }
    const double error = std::fabs(static_cast<double>(results[0][i]) - exact);
    const double bound = errorBound(run.format, encodes, fp32Ops, absSum);
    ASSERT_LE(error, bound) << "element " << i << " exact " << exact << " got " << results[0][i];
    worstRatio = std::max(worstRatio, error / bound);
  }
  ASSERT_NO_FATAL_FAILURE(expectSixteenBitValues(results[0], run.format));
  testing::Test::RecordProperty("worst_error_over_bound", std::to_string(worstRatio));
}

std::vector<size_t> countsFor(int p) {
  const size_t q = static_cast<size_t>(p);
  return {size_t{0}, size_t{1}, q - 1, q, q + 1, size_t{13}, size_t{1021}, size_t{100003}};
}

TEST(CompressedRingFake, IntegerSumsAreExactOverRankCountAndSegmentGrid) {
  for (HalfFormat format : kFormats) {
    for (int p = 1; p <= 8; ++p) {
      for (size_t count : countsFor(p)) {
        for (uint64_t segmentBytes :
             {uint64_t{4}, uint64_t{100}, uint64_t{4096}, uint64_t{1} << 20}) {
          if (segmentBytes < 4096 && count > 2000) continue;  // keeps the message count reasonable
          for (bool inPlace : {false, true}) {
            CompressedRun run;
            run.format = format;
            run.segmentBytes = segmentBytes;
            run.inPlace = inPlace;
            ASSERT_NO_FATAL_FAILURE(checkExactIntegers(p, count, run));
          }
        }
      }
    }
  }
}

TEST(CompressedRingFake, RandomDataStaysWithinTheErrorBound) {
  for (HalfFormat format : kFormats) {
    for (int p = 1; p <= 8; ++p) {
      for (size_t count : countsFor(p)) {
        for (uint64_t segmentBytes : {uint64_t{256}, uint64_t{1} << 20}) {
          if (segmentBytes < 4096 && count > 2000) continue;
          CompressedRun run;
          run.format = format;
          run.scale = 1.0f / static_cast<float>(p);
          run.segmentBytes = segmentBytes;
          run.inPlace = count % 2 == 1;
          // p encodes (the first input, p-2 partial sums, the final sum); p products, p-1 sums.
          ASSERT_NO_FATAL_FAILURE(checkRandomWithinBound(p, count, run, p, 2 * p - 1));
        }
      }
    }
  }
}

// The halves run one after the other give the allreduce's bits; after the reduce-scatter the
// owned chunk holds the fp32 sum, which the allgather rounds in place.
TEST(CompressedRingFake, ReduceScatterThenAllgatherIsTheAllreduce) {
  for (HalfFormat format : kFormats) {
    for (int p : {2, 3, 5}) {
      const size_t count = 1001;
      const Buffers inputs = randomInputs(p, count, 77);
      const float scale = 1.0f / static_cast<float>(p);
      CompressedRun run;
      run.format = format;
      run.scale = scale;
      run.segmentBytes = 128;
      FakeFabric wholeFabric(p);
      const Buffers whole = runCompressed(inputs, run, wholeFabric);

      FakeFabric fabric(p);
      Buffers afterReduceScatter(static_cast<size_t>(p)), results(static_cast<size_t>(p));
      const std::vector<Status> statuses = runRanks(fabric, [&](int r, Transport& transport) {
        Workspace workspace;
        const RingSchedule schedule(p, r, count, sizeof(float), run.segmentBytes);
        std::vector<float>& out = results[static_cast<size_t>(r)];
        out.assign(count, -1.0f);
        GFSHIM_RETURN_IF_ERROR(
            runCompressedRing(schedule, RingPart::kReduceScatter, format, scale, transport,
                              workspace, inputs[static_cast<size_t>(r)].data(), out.data()));
        afterReduceScatter[static_cast<size_t>(r)] = out;
        return runCompressedRing(schedule, RingPart::kAllgather, format, 123.0f /* unused */,
                                 transport, workspace, nullptr, out.data());
      });
      for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(std::memcmp(whole[0].data(), results[static_cast<size_t>(r)].data(),
                              count * sizeof(float)),
                  0)
            << halfFormatName(format) << " p=" << p << " rank " << r;
        const ElementRange owned = ringChunk(count, p, (r + 1) % p);
        std::vector<float> fp32Sum(afterReduceScatter[static_cast<size_t>(r)].begin() +
                                       static_cast<std::ptrdiff_t>(owned.offset),
                                   afterReduceScatter[static_cast<size_t>(r)].begin() +
                                       static_cast<std::ptrdiff_t>(owned.offset + owned.count));
        std::vector<uint16_t> codes(owned.count);
        std::vector<float> rounded(owned.count);
        encodeHalf(format, fp32Sum.data(), 1.0f, codes.data(), owned.count);
        decodeHalf(format, codes.data(), rounded.data(), owned.count);
        ASSERT_EQ(std::memcmp(rounded.data(), whole[0].data() + owned.offset,
                              owned.count * sizeof(float)),
                  0)
            << "the allgather does not round the owned chunk in place";
        bool someNotSixteenBit = false;
        for (size_t i = 0; i < owned.count; ++i) someNotSixteenBit |= rounded[i] != fp32Sum[i];
        EXPECT_TRUE(someNotSixteenBit) << "reduce-scatter result already rounded to 16 bits";
      }
    }
  }
}

// Overflow to Inf and a NaN input: every rank still sees the same bits, so all redo the call.
TEST(CompressedRingFake, InfAndNanResultsAreIdenticalOnEveryRank) {
  const int p = 4;
  const size_t count = 64;
  Buffers inputs = randomInputs(p, count, 5);
  for (auto& in : inputs) in[3] = 40000.0f;  // 160000 overflows fp16
  inputs[2][10] = std::numeric_limits<float>::quiet_NaN();
  inputs[1][20] = -std::numeric_limits<float>::infinity();
  for (HalfFormat format : kFormats) {
    CompressedRun run;
    run.format = format;
    run.segmentBytes = 32;
    FakeFabric fabric(p);
    const Buffers results = runCompressed(inputs, run, fabric);
    EXPECT_EQ(std::isinf(results[0][3]), format == HalfFormat::kFp16);  // bf16 has the range
    EXPECT_TRUE(std::isnan(results[0][10]));
    EXPECT_EQ(results[0][20], -std::numeric_limits<float>::infinity());
  }
}

TEST(CompressedRingFake, MissingRankTimesOutWithAnError) {
  FakeFabric fabric(3, std::chrono::milliseconds(200));
  Buffers buffers(3, std::vector<float>(300, 1.0f));
  const auto statuses = runRanks(fabric, [&](int r, Transport& transport) {
    if (r == 2) return Status::ok();
    Workspace workspace;
    const RingSchedule schedule(3, r, 300, sizeof(float), 64);
    return runCompressedRing(schedule, RingPart::kAllreduce, HalfFormat::kFp16, 1.0f, transport,
                             workspace, buffers[static_cast<size_t>(r)].data(),
                             buffers[static_cast<size_t>(r)].data());
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kTimeout);
  EXPECT_EQ(statuses[1].code(), StatusCode::kTimeout);
}

TEST(CompressedRingFake, RejectsAScheduleOfNonFloatElements) {
  FakeFabric fabric(1);
  FakeTransport transport(fabric, 0);
  Workspace workspace;
  const RingSchedule schedule(1, 0, 8, sizeof(double), 64);
  std::vector<float> buffer(16, 1.0f);
  const Status status = runCompressedRing(schedule, RingPart::kAllreduce, HalfFormat::kFp16, 1.0f,
                                          transport, workspace, buffer.data(), buffer.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

TEST(CompressedTorusFake, GridsGiveIdenticalBitsExactIntegersAndBoundedError) {
  for (const auto& [x, y] :
       {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}, std::pair{1, 3}, std::pair{3, 1}}) {
    const int p = x * y;
    const size_t q = static_cast<size_t>(p);
    for (HalfFormat format : kFormats) {
      for (size_t count : {size_t{0}, size_t{1}, q - 1, q + 1, size_t{997}, size_t{30011}}) {
        for (const auto& [segmentBytes, pieces] :
             {std::pair{uint64_t{64}, size_t{1}}, std::pair{uint64_t{4096}, size_t{1}},
              std::pair{uint64_t{4096}, size_t{3}}}) {
          if (segmentBytes < 4096 && count > 2000) continue;
          CompressedRun run;
          run.format = format;
          run.segmentBytes = segmentBytes;
          run.torusPieces = pieces;  // pipelined: each piece keeps the same bound
          run.torus = {x, y};
          run.inPlace = count % 2 == 0;
          ASSERT_NO_FATAL_FAILURE(checkExactIntegers(p, count, run));
          run.scale = 1.0f / static_cast<float>(p);
          // X-1 encodes in the row chain and Y in the column ring; X products, X-1 + Y-1 sums.
          ASSERT_NO_FATAL_FAILURE(checkRandomWithinBound(p, count, run, x + y - 1, 2 * x + y - 2));
        }
      }
    }
  }
}

}  // namespace
}  // namespace gfshim
