// The CUDA kernels (cuda/gpu_kernels.h) against their CPU references, bit for bit: the fp16/bf16
// codec (half_codec.h) over boundary classes and all 65536 codes, the CSC blocks (csc.h: norms,
// selection, pack/unpack/clear), fusion gather/scatter, the float reductions (reducer.h) and the
// non-finite check. Lengths cover empty, scalar-only, vector+tail and large buffers; pointer
// offsets cover the vector path with a scalar head and the all-scalar path.
//
// Every output buffer is poisoned (0xFF bytes: a NaN for floats, 0xFFFF codes) before the kernel
// runs, so a kernel that writes nothing, or too little, fails. Where a NaN's payload is not part
// of a kernel's contract (sums and products of NaNs: the GPU returns a canonical NaN, x86 the
// operand's), only NaN-ness is compared; everywhere else the bits are.
//
// Without a CUDA device every test skips with the reason (ctest reports the binary as skipped).
#include "cuda/gpu_kernels.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "algo/reducer.h"
#include "compress/csc.h"
#include "compress/half_codec.h"

namespace gfshim::cuda {
namespace {

constexpr uint8_t kPoisonByte = 0xff;

// Why the tests cannot run, or "" where a device is present. Without a driver or a device,
// cudaGetDeviceCount fails and leaves the count alone, so its status is what tells.
const std::string& missingDeviceReason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(status);
    }
    if (count <= 0) return std::string("no CUDA device: cudaGetDeviceCount found none");
    return std::string();
  }();
  return reason;
}

template <typename T>
uint64_t bitsOf(T value) {
  if constexpr (sizeof(T) == 1) {
    uint8_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  } else if constexpr (sizeof(T) == 2) {
    uint16_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  } else if constexpr (sizeof(T) == 4) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  } else {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  }
}

float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

template <typename T>
bool isNanValue(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(value);
  } else {
    return false;
  }
}

enum class NanRule { kBits, kClass };

// want == got element by element: the same bits, or (NanRule::kClass) both NaN.
template <typename T>
::testing::AssertionResult sameBits(const std::vector<T>& want, const std::vector<T>& got,
                                    NanRule rule = NanRule::kBits) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << want.size() << " vs " << got.size();
  }
  size_t mismatches = 0;
  size_t first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool bothNan = rule == NanRule::kClass && isNanValue(want[i]) && isNanValue(got[i]);
    if (!bothNan && bitsOf(want[i]) != bitsOf(got[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << want.size() << " elements differ; first at " << first
         << ": want 0x" << std::hex << bitsOf(want[first]) << " got 0x" << bitsOf(got[first])
         << std::dec;
}

// Skips without a device; owns a stream and every allocation of a test. The helpers are public
// for the typed checks (checkReduce) written as free templates.
class GpuKernels : public ::testing::Test {
 public:
  void SetUp() override {
    if (!missingDeviceReason().empty()) GTEST_SKIP() << missingDeviceReason();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }

  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void* stream() { return stream_; }

  void sync() {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }

  // `n` elements of T plus 4 elements of slack for views offset by up to 3 elements (kOffsets),
  // poisoned. (16 bytes of slack, as before, was too little for doubles offset by 3: found by
  // the first run on a GPU.)
  template <typename T>
  T* deviceArray(size_t n) {
    void* p = nullptr;
    const size_t bytes = (n + 4) * sizeof(T);
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    allocations_.push_back(p);
    EXPECT_EQ(cudaMemset(p, kPoisonByte, bytes), cudaSuccess);
    return static_cast<T*>(p);
  }

  template <typename T>
  void upload(T* device, const std::vector<T>& host) {
    ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }

  template <typename T>
  std::vector<T> download(const T* device, size_t n) {
    std::vector<T> host(n);
    sync();
    EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

  template <typename T>
  void poison(T* device, size_t n) {
    ASSERT_EQ(cudaMemset(device, kPoisonByte, n * sizeof(T)), cudaSuccess);
  }

  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
};

const std::vector<size_t> kLengths = {0, 1, 7, 8, 9, 31, 32, 33, 1000, (size_t{1} << 20) + 3};

// (input offset, output offset) in elements: aligned; both off but alignable together (vector
// path after a scalar head); not alignable together (scalar path); input off by 3.
const std::vector<std::pair<size_t, size_t>> kOffsets = {{0, 0}, {1, 1}, {0, 1}, {3, 0}};

// fp32 boundary classes for the codec, both signs.
std::vector<uint32_t> codecBoundaryBits() {
  const std::vector<uint32_t> positive = {
      0x00000000,                                      // +0
      0x00000001, 0x00000002, 0x00400000, 0x007fffff,  // fp32 subnormals: fp16 gets 0
      0x00800000, 0x0080ffff,                          // fp32 min normal
      0x33000000,  // 2^-25: tie between 0 and 2^-24, goes to 0 (even)
      0x33000001,  // just above: 2^-24
      0x32ffffff,  // just below 2^-25: 0
      0x33800000,  // 2^-24, smallest fp16 subnormal
      0x33c00000,  // 1.5 * 2^-24: tie, goes to 2 * 2^-24
      0x34200000,  // 2.5 * 2^-24: tie, goes to 2 * 2^-24
      0x387fc000,  // largest fp16 subnormal
      0x387fe000,  // tie between the largest subnormal and 2^-14: carries into the normal
      0x387fffff, 0x38800000, 0x38800001, 0x38000000,
      0x3f800000,  // 1
      0x3f801000,  // 1 + 2^-11: fp16 tie, stays 1 (even)
      0x3f803000,  // 1 + 3 * 2^-11: fp16 tie, rounds up
      0x3f800fff, 0x3f801001,
      0x3f808000,  // bf16 tie, stays (even)
      0x3f818000,  // bf16 tie, rounds up
      0x3f807fff, 0x3f808001,
      0x477fe000,  // 65504, fp16 max finite
      0x477fef00,  // 65519: 65504
      0x477fefff,  // just below 65520: 65504
      0x477ff000,  // 65520: the tie to 2^16, Inf
      0x477ff001, 0x47800000, 0x4b800000,
      0x7f7f8000,  // bf16 overflow through rounding: Inf
      0x7f7f7fff,
      0x7f7fffff,  // fp32 max finite
      0x7f800000,  // Inf
      0x7f800001,  // signalling NaN, lowest payload bit
      0x7f802000,  // payload bit 13: the lowest fp16 keeps
      0x7f801fff,  // payload only below what fp16 keeps
      0x7fa00000, 0x7fc00000, 0x7fc00001, 0x7fd55555, 0x7fffffff, 0x7f812345, 0x7f810000,
  };
  std::vector<uint32_t> bits;
  for (uint32_t b : positive) {
    bits.push_back(b);
    bits.push_back(b | 0x80000000u);
  }
  return bits;
}

// Boundary values first, then random bit patterns (every class, NaNs included) and random
// values of moderate magnitude, `n` in all, rotated by `rotation` so specials also land in the
// head and tail of a vector split.
std::vector<float> codecInput(size_t n, uint32_t seed, bool allowNan = true) {
  std::mt19937 random(seed);
  std::vector<uint32_t> boundary = codecBoundaryBits();
  std::vector<float> values;
  values.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    if (i < boundary.size()) {
      bits = boundary[i];
    } else if (i % 3 == 0) {
      bits = static_cast<uint32_t>(random());
    } else {
      std::uniform_real_distribution<float> magnitude(-30.0f, 17.0f);
      const float value = std::ldexp(1.0f + static_cast<float>(random() % 1024) / 1024.0f,
                                     static_cast<int>(magnitude(random)));
      bits = static_cast<uint32_t>(bitsOf(random() % 2 != 0 ? -value : value));
    }
    if (!allowNan && (bits & 0x7fffffffu) > 0x7f800000u) bits = 0x3f800000u;
    values.push_back(floatFromBits(bits));
  }
  if (n > 0)
    std::rotate(values.begin(), values.begin() + static_cast<ptrdiff_t>(seed % n), values.end());
  return values;
}

// ---- Codec ---------------------------------------------------------------------------------

TEST_F(GpuKernels, EncodeMatchesCpuOverBoundariesLengthsAndAlignments) {
  const std::vector<float> scales = {1.0f, 0.25f, 3.0f, 1e-30f, -65536.0f};
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (size_t n : kLengths) {
      for (const auto& [inOffset, outOffset] : kOffsets) {
        for (float scale : scales) {
          if (n > 100000 && scale != 1.0f && scale != 3.0f) continue;  // keep the run short
          SCOPED_TRACE(::testing::Message() << halfFormatName(format) << " n=" << n << " offsets "
                                            << inOffset << "," << outOffset << " scale " << scale);
          const std::vector<float> input = codecInput(n, static_cast<uint32_t>(n + inOffset));
          float* in = deviceArray<float>(n) + inOffset;
          uint16_t* out = deviceArray<uint16_t>(n + 8) + outOffset;
          upload(in, input);
          ASSERT_EQ(encodeHalfDevice(format, in, scale, out, n, stream()), 0);
          std::vector<uint16_t> want(n + 8, 0xffff);  // the tail past n stays poisoned
          encodeHalf(format, input.data(), scale, want.data(), n);
          ASSERT_TRUE(sameBits(want, download(out, n + 8)));
        }
      }
    }
  }
}

TEST_F(GpuKernels, EncodeWithNanScalePassesTheScaleNan) {
  const size_t n = 1000;
  const std::vector<float> input = codecInput(n, 7, /*allowNan=*/false);
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (uint32_t scaleBits : {0x7fc00000u, 0xffd12345u, 0x7f800001u}) {
      float* in = deviceArray<float>(n);
      uint16_t* out = deviceArray<uint16_t>(n);
      upload(in, input);
      ASSERT_EQ(encodeHalfDevice(format, in, floatFromBits(scaleBits), out, n, stream()), 0);
      std::vector<uint16_t> want(n);
      encodeHalf(format, input.data(), floatFromBits(scaleBits), want.data(), n);
      EXPECT_TRUE(sameBits(want, download(out, n))) << halfFormatName(format) << " " << scaleBits;
    }
  }
}

TEST_F(GpuKernels, DecodeMatchesCpuOnAll65536Codes) {
  const size_t n = 65536;
  std::vector<uint16_t> codes(n);
  std::iota(codes.begin(), codes.end(), uint16_t{0});
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    uint16_t* in = deviceArray<uint16_t>(n);
    float* out = deviceArray<float>(n);
    upload(in, codes);
    ASSERT_EQ(decodeHalfDevice(format, in, 1.0f, out, n, stream()), 0);
    std::vector<float> want(n);
    decodeHalf(format, codes.data(), want.data(), n);
    EXPECT_TRUE(sameBits(want, download(out, n))) << halfFormatName(format);
  }
}

TEST_F(GpuKernels, DecodeMatchesCpuOverLengthsAlignmentsAndScales) {
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (size_t n : kLengths) {
      for (const auto& [inOffset, outOffset] : kOffsets) {
        for (float scale : {1.0f, 0.5f, 3.0f, 1e-38f}) {
          SCOPED_TRACE(::testing::Message() << halfFormatName(format) << " n=" << n << " offsets "
                                            << inOffset << "," << outOffset << " scale " << scale);
          std::mt19937 random(static_cast<uint32_t>(n * 31 + inOffset));
          std::vector<uint16_t> codes(n);
          for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint16_t>(random());
          uint16_t* in = deviceArray<uint16_t>(n) + inOffset;
          float* out = deviceArray<float>(n + 8) + outOffset;
          upload(in, codes);
          ASSERT_EQ(decodeHalfDevice(format, in, scale, out, n, stream()), 0);
          std::vector<float> want(n + 8, floatFromBits(0xffffffffu));
          decodeHalf(format, codes.data(), want.data(), n);
          // scale 1 is exactly decodeHalf; otherwise one product, whose NaN payload is open.
          NanRule rule = NanRule::kBits;
          if (scale != 1.0f) {
            for (size_t i = 0; i < n; ++i) want[i] = want[i] * scale;
            rule = NanRule::kClass;
          }
          ASSERT_TRUE(sameBits(want, download(out, n + 8), rule));
        }
      }
    }
  }
}

TEST_F(GpuKernels, CodecRoundTripIsIdentityOnEveryCodeEncodeProduces) {
  // to16(from16(c)) == c for every code but the signalling fp16 NaNs (from16 makes them quiet).
  const size_t n = 65536;
  std::vector<uint16_t> codes(n);
  std::iota(codes.begin(), codes.end(), uint16_t{0});
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    uint16_t* in = deviceArray<uint16_t>(n);
    float* wide = deviceArray<float>(n);
    uint16_t* back = deviceArray<uint16_t>(n);
    upload(in, codes);
    ASSERT_EQ(decodeHalfDevice(format, in, 1.0f, wide, n, stream()), 0);
    ASSERT_EQ(encodeHalfDevice(format, wide, 1.0f, back, n, stream()), 0);
    std::vector<float> cpuWide(n);
    std::vector<uint16_t> want(n);
    decodeHalf(format, codes.data(), cpuWide.data(), n);
    encodeHalf(format, cpuWide.data(), 1.0f, want.data(), n);
    EXPECT_TRUE(sameBits(want, download(back, n))) << halfFormatName(format);
  }
}

// ---- CSC -----------------------------------------------------------------------------------

struct NormCase {
  size_t count;
  size_t chunkElements;
};

const std::vector<NormCase> kNormCases = {
    {1, 16},     {15, 16},     {16, 16},     {17, 16},       {1000, 16},
    {1000, 100}, {12345, 100}, {4096, 4096}, {4097, 4096},   {100000, 4096},
    {5000, 1},   {300, 7},     {33, 1000},   {70000, 32768}, {(size_t{1} << 20) + 3, 4096}};

// Gradient-like data with -0, subnormals, huge values (sums overflow to Inf) and, per chunk at
// random, NaN and Inf elements.
std::vector<float> normInput(size_t count, size_t chunkElements, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) {
    switch (random() % 16) {
      case 0:
        data[i] = -0.0f;
        break;
      case 1:
        data[i] = floatFromBits(static_cast<uint32_t>(random() % 0x800000u));  // subnormal
        break;
      case 2:
        data[i] = uniform(random) * 3e38f;
        break;
      default:
        data[i] = uniform(random) * std::ldexp(1.0f, static_cast<int>(random() % 20) - 10);
    }
  }
  const size_t chunks = cscChunkCount(count, chunkElements);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t length = cscChunkLength(count, chunkElements, c);
    const uint32_t roll = static_cast<uint32_t>(random() % 10);
    if (roll == 0) data[c * chunkElements + random() % length] = floatFromBits(0x7fc01234u);
    if (roll == 1) data[c * chunkElements + random() % length] = floatFromBits(0xff800000u);
  }
  return data;
}

TEST_F(GpuKernels, ChunkNormsMatchCpuBits) {
  for (const NormCase& test : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "count " << test.count << " chunk " << test.chunkElements);
    const std::vector<float> data = normInput(test.count, test.chunkElements, 11);
    const size_t chunks = cscChunkCount(test.count, test.chunkElements);
    for (size_t offset : {0, 1}) {
      float* deviceData = deviceArray<float>(test.count) + offset;
      float* norms = deviceArray<float>(chunks + 1);
      upload(deviceData, data);
      ASSERT_EQ(chunkL1NormsDevice(deviceData, test.count, test.chunkElements, norms, stream()), 0);
      std::vector<float> want(chunks + 1, floatFromBits(0xffffffffu));
      chunkL1Norms(data.data(), test.count, test.chunkElements, want.data());
      ASSERT_TRUE(sameBits(want, download(norms, chunks + 1), NanRule::kClass));
    }
  }
}

TEST_F(GpuKernels, AddAndChunkNormsMatchCpuBits) {
  for (const NormCase& test : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "count " << test.count << " chunk " << test.chunkElements);
    std::vector<float> residual = normInput(test.count, test.chunkElements, 21);
    const std::vector<float> send = normInput(test.count, test.chunkElements, 22);
    const size_t chunks = cscChunkCount(test.count, test.chunkElements);
    float* deviceResidual = deviceArray<float>(test.count);
    float* deviceSend = deviceArray<float>(test.count);
    float* norms = deviceArray<float>(chunks + 1);
    upload(deviceResidual, residual);
    upload(deviceSend, send);
    ASSERT_EQ(addAndChunkL1NormsDevice(deviceResidual, deviceSend, test.count, test.chunkElements,
                                       norms, stream()),
              0);
    std::vector<float> want(chunks + 1, floatFromBits(0xffffffffu));
    addAndChunkL1Norms(residual.data(), send.data(), test.count, test.chunkElements, want.data());
    EXPECT_TRUE(sameBits(residual, download(deviceResidual, test.count), NanRule::kClass));
    EXPECT_TRUE(sameBits(want, download(norms, chunks + 1), NanRule::kClass));
  }
}

TEST_F(GpuKernels, NormsOfEmptyBufferWriteNothing) {
  float* norms = deviceArray<float>(1);
  float* data = deviceArray<float>(1);
  ASSERT_EQ(chunkL1NormsDevice(data, 0, 16, norms, stream()), 0);
  ASSERT_EQ(addAndChunkL1NormsDevice(data, data, 0, 16, norms, stream()), 0);
  EXPECT_EQ(bitsOf(download(norms, 1)[0]), 0xffffffffu);
}

enum class NormPattern { kRandomTies, kAllEqual, kAllNan, kAscending, kSignedZerosAndSpecials };

std::vector<float> selectionNorms(size_t chunks, NormPattern pattern, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<float> norms(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    switch (pattern) {
      case NormPattern::kRandomTies: {
        const uint32_t roll = static_cast<uint32_t>(random() % 20);
        if (roll == 0) {
          norms[c] = floatFromBits(0x7fc00000u | static_cast<uint32_t>(random() % 0x400000u));
        } else if (roll == 1) {
          norms[c] = floatFromBits(0xffc00001u);
        } else if (roll == 2) {
          norms[c] = std::numeric_limits<float>::infinity();
        } else {
          norms[c] = static_cast<float>(random() % 8) * 0.5f;  // many ties
        }
        break;
      }
      case NormPattern::kAllEqual:
        norms[c] = 2.0f;
        break;
      case NormPattern::kAllNan:
        norms[c] = std::numeric_limits<float>::quiet_NaN();
        break;
      case NormPattern::kAscending:
        norms[c] = static_cast<float>(c);
        break;
      case NormPattern::kSignedZerosAndSpecials: {
        const float pool[] = {0.0f,
                              -0.0f,
                              1e-45f,
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              -1.0f,
                              std::numeric_limits<float>::quiet_NaN()};
        norms[c] = pool[random() % 8];
        break;
      }
    }
  }
  return norms;
}

TEST_F(GpuKernels, SelectTopChunksMatchesCpuSetAndOrder) {
  const NormPattern patterns[] = {NormPattern::kRandomTies, NormPattern::kAllEqual,
                                  NormPattern::kAllNan, NormPattern::kAscending,
                                  NormPattern::kSignedZerosAndSpecials};
  for (size_t chunks : {1, 2, 3, 7, 100, 1000, 5000, 70001}) {
    for (NormPattern pattern : patterns) {
      const std::vector<float> norms =
          selectionNorms(chunks, pattern, static_cast<uint32_t>(chunks));
      std::vector<size_t> ks = {1, 2, chunks / 3, chunks / 2 + 1, chunks - 1, chunks};
      std::sort(ks.begin(), ks.end());
      ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
      for (size_t k : ks) {
        if (k == 0 || k > chunks) continue;
        SCOPED_TRACE(::testing::Message() << "chunks " << chunks << " pattern "
                                          << static_cast<int>(pattern) << " k " << k);
        float* deviceNorms = deviceArray<float>(chunks);
        uint32_t* selected = deviceArray<uint32_t>(k + 1);
        const size_t scratchBytes = selectTopChunksScratchBytes(chunks);
        uint8_t* scratch = deviceArray<uint8_t>(scratchBytes);
        upload(deviceNorms, norms);
        ASSERT_EQ(selectTopChunksDevice(deviceNorms, chunks, k, selected, scratch, scratchBytes,
                                        stream()),
                  0);
        std::vector<uint32_t> want;
        selectTopChunks(norms.data(), chunks, k, &want);
        want.push_back(0xffffffffu);  // the entry past k stays poisoned
        ASSERT_TRUE(sameBits(want, download(selected, k + 1)));
      }
    }
  }
}

TEST_F(GpuKernels, SelectTopChunksRejectsTooSmallScratch) {
  const size_t chunks = 1000;
  float* norms = deviceArray<float>(chunks);
  uint32_t* selected = deviceArray<uint32_t>(chunks);
  uint8_t* scratch = deviceArray<uint8_t>(64);
  EXPECT_EQ(selectTopChunksDevice(norms, chunks, 10, selected, scratch, 64, stream()),
            static_cast<int>(cudaErrorInvalidValue));
  EXPECT_EQ(selectTopChunksDevice(norms, chunks, 0, selected, scratch, 64, stream()), 0);
}

struct PackCase {
  size_t count;
  size_t chunkElements;
  size_t k;
  bool lastChunkSelected;
};

const std::vector<PackCase> kPackCases = {{1, 16, 1, true},
                                          {17, 16, 1, true},
                                          {17, 16, 1, false},
                                          {1000, 16, 10, true},
                                          {1000, 16, 63, false},
                                          {12345, 100, 12, true},
                                          {12345, 100, 124, true},
                                          {12345, 100, 40, false},
                                          {100000, 4096, 3, true},
                                          {100000, 4096, 3, false},
                                          {100000, 4096, 25, true},
                                          {1000, 7, 50, true},
                                          {1000, 7, 143, true},
                                          {(size_t{1} << 20) + 3, 4096, 26, true},
                                          {(size_t{1} << 20), 4096, 256, true},
                                          {4096, 4096, 1, true}};

// A selection of k chunks as the CPU makes it, with or without the (possibly short) last chunk.
std::vector<uint32_t> packSelection(const PackCase& test, uint32_t seed) {
  const size_t chunks = cscChunkCount(test.count, test.chunkElements);
  std::vector<float> norms = selectionNorms(chunks, NormPattern::kRandomTies, seed);
  for (float& norm : norms) {
    if (std::isnan(norm)) norm = 1.0f;
  }
  norms[chunks - 1] = test.lastChunkSelected ? std::numeric_limits<float>::quiet_NaN() : -1.0f;
  std::vector<uint32_t> selected;
  selectTopChunks(norms.data(), chunks, test.k, &selected);
  return selected;
}

TEST_F(GpuKernels, GatherMatchesCscPackAndOffsets) {
  for (const PackCase& test : kPackCases) {
    for (size_t offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message()
                   << "count " << test.count << " chunk " << test.chunkElements << " k " << test.k
                   << " last " << test.lastChunkSelected << " offset " << offset);
      const std::vector<uint32_t> selected = packSelection(test, 5);
      const size_t k = selected.size();
      ASSERT_EQ(k, test.k);
      const std::vector<float> data = normInput(test.count, test.chunkElements, 3);
      float* deviceData = deviceArray<float>(test.count) + offset;
      uint32_t* deviceSelected = deviceArray<uint32_t>(k);
      uint64_t* offsets = deviceArray<uint64_t>(k + 1);
      const size_t capacity = k * test.chunkElements + 8;
      float* packed = deviceArray<float>(capacity) + offset;
      upload(deviceData, data);
      upload(deviceSelected, selected);
      ASSERT_EQ(cscGatherDevice(deviceData, test.count, test.chunkElements, deviceSelected, k,
                                offsets, packed, stream()),
                0);
      std::vector<float> want(capacity, floatFromBits(0xffffffffu));
      const size_t n =
          cscPack(data.data(), test.count, test.chunkElements, selected.data(), k, want.data());
      std::vector<uint64_t> wantOffsets(k + 1, 0);
      for (size_t s = 0; s < k; ++s) {
        wantOffsets[s + 1] =
            wantOffsets[s] + cscChunkLength(test.count, test.chunkElements, selected[s]);
      }
      ASSERT_EQ(wantOffsets[k], n);
      EXPECT_TRUE(sameBits(wantOffsets, download(offsets, k + 1)));
      EXPECT_TRUE(sameBits(want, download(packed, capacity)));  // copies: NaN bits too
    }
  }
}

TEST_F(GpuKernels, ScatterMatchesCscUnpackAndClearChunks) {
  for (const PackCase& test : kPackCases) {
    for (size_t offset : {0, 1}) {
      for (bool withResidual : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "count " << test.count << " chunk " << test.chunkElements << " k " << test.k
                     << " last " << test.lastChunkSelected << " offset " << offset << " residual "
                     << withResidual);
        const std::vector<uint32_t> selected = packSelection(test, 9);
        const size_t k = selected.size();
        std::vector<uint64_t> offsets(k + 1, 0);
        for (size_t s = 0; s < k; ++s) {
          offsets[s + 1] = offsets[s] + cscChunkLength(test.count, test.chunkElements, selected[s]);
        }
        const size_t n = offsets[k];
        const std::vector<float> summed = normInput(n, test.chunkElements, 4);
        std::vector<float> residual = normInput(test.count, test.chunkElements, 6);
        float* deviceSummed = deviceArray<float>(n) + offset;
        uint32_t* deviceSelected = deviceArray<uint32_t>(k);
        uint64_t* deviceOffsets = deviceArray<uint64_t>(k + 1);
        float* recv = deviceArray<float>(test.count) + offset;
        float* deviceResidual = deviceArray<float>(test.count) + offset;
        upload(deviceSummed, summed);
        upload(deviceSelected, selected);
        upload(deviceOffsets, offsets);
        upload(deviceResidual, residual);
        ASSERT_EQ(cscScatterDevice(deviceSummed, test.count, test.chunkElements, deviceSelected, k,
                                   deviceOffsets, recv, withResidual ? deviceResidual : nullptr,
                                   stream()),
                  0);
        std::vector<float> want(test.count, floatFromBits(0xffffffffu));
        EXPECT_EQ(cscUnpack(summed.data(), test.count, test.chunkElements, selected.data(), k,
                            want.data()),
                  n);
        EXPECT_TRUE(sameBits(want, download(recv, test.count)));
        const std::vector<float> residualBefore = residual;
        if (withResidual) {
          cscClearChunks(residual.data(), test.count, test.chunkElements, selected.data(), k);
        }
        EXPECT_TRUE(sameBits(withResidual ? residual : residualBefore,
                             download(deviceResidual, test.count)));
      }
    }
  }
}

TEST_F(GpuKernels, GatherAndScatterOfNoChunks) {
  const size_t count = 100;
  float* data = deviceArray<float>(count);
  float* recv = deviceArray<float>(count);
  float* packed = deviceArray<float>(1);
  uint64_t* offsets = deviceArray<uint64_t>(1);
  ASSERT_EQ(cscGatherDevice(data, count, 16, nullptr, 0, offsets, packed, stream()), 0);
  EXPECT_EQ(download(offsets, 1)[0], 0u);
  EXPECT_EQ(bitsOf(download(packed, 1)[0]), 0xffffffffu);
  ASSERT_EQ(cscScatterDevice(packed, count, 16, nullptr, 0, offsets, recv, nullptr, stream()), 0);
  EXPECT_TRUE(sameBits(std::vector<float>(count, 0.0f), download(recv, count)));
}

// ---- Fusion --------------------------------------------------------------------------------

struct FusionLayout {
  std::vector<uint64_t> tensorOffsets;  // in the tensor arena
  std::vector<FusionSlice> slices;      // tensor pointers into the device arena
  size_t arenaBytes = 0;
  size_t packedBytes = 0;
};

// `count` tensors of awkward sizes at odd places in one arena, packed tightly (odd offsets) or
// at 256-byte boundaries, with gaps the kernels must not touch.
FusionLayout fusionLayout(size_t count, bool alignedPacking, uint32_t seed) {
  const uint64_t sizes[] = {1, 3, 4095, 4096, 4097, 15, 16, 17, 0, 100, 65537, 12};
  std::mt19937 random(seed);
  FusionLayout layout;
  uint64_t arena = 0;
  uint64_t packed = 0;
  for (size_t t = 0; t < count; ++t) {
    uint64_t bytes = sizes[random() % (sizeof sizes / sizeof sizes[0])];
    if (t == count / 2) bytes = (uint64_t{3} << 20) + 5;  // one large tensor
    if (t == count / 3) bytes = uint64_t{1} << 20;
    arena += random() % 19;  // any alignment
    layout.tensorOffsets.push_back(arena);
    arena += bytes;
    if (alignedPacking) packed = (packed + 255) / 256 * 256;
    layout.slices.push_back(FusionSlice{nullptr, packed, bytes});
    packed += bytes + (alignedPacking ? 0 : random() % 3);
  }
  layout.arenaBytes = arena + 64;
  layout.packedBytes = packed + 64;
  return layout;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(random() % 255);  // never the poison
  return bytes;
}

TEST_F(GpuKernels, FusionGatherAndScatterCopyExactlyTheSlices) {
  for (size_t count : {1, 161, 3000}) {
    for (bool aligned : {false, true}) {
      SCOPED_TRACE(::testing::Message() << count << " slices, aligned packing " << aligned);
      FusionLayout layout = fusionLayout(count, aligned, static_cast<uint32_t>(count));
      uint8_t* arena = deviceArray<uint8_t>(layout.arenaBytes);
      uint8_t* packed = deviceArray<uint8_t>(layout.packedBytes);
      for (size_t t = 0; t < count; ++t) layout.slices[t].tensor = arena + layout.tensorOffsets[t];
      FusionSlice* slices = deviceArray<FusionSlice>(count);
      upload(slices, layout.slices);

      // Gather: packed gets every slice, its gaps stay poisoned.
      const std::vector<uint8_t> arenaBytes = randomBytes(layout.arenaBytes, 1);
      upload(arena, arenaBytes);
      ASSERT_EQ(fusionGatherDevice(slices, count, packed, stream()), 0);
      std::vector<uint8_t> wantPacked(layout.packedBytes, kPoisonByte);
      for (size_t t = 0; t < count; ++t) {
        const FusionSlice& slice = layout.slices[t];
        std::memcpy(wantPacked.data() + slice.offset, arenaBytes.data() + layout.tensorOffsets[t],
                    slice.bytes);
      }
      EXPECT_TRUE(sameBits(wantPacked, download(packed, layout.packedBytes)));

      // Scatter: every tensor gets its slice, the arena around them stays poisoned.
      const std::vector<uint8_t> packedBytes = randomBytes(layout.packedBytes, 2);
      upload(packed, packedBytes);
      poison(arena, layout.arenaBytes);
      ASSERT_EQ(fusionScatterDevice(slices, count, packed, stream()), 0);
      std::vector<uint8_t> wantArena(layout.arenaBytes, kPoisonByte);
      for (size_t t = 0; t < count; ++t) {
        const FusionSlice& slice = layout.slices[t];
        std::memcpy(wantArena.data() + layout.tensorOffsets[t], packedBytes.data() + slice.offset,
                    slice.bytes);
      }
      EXPECT_TRUE(sameBits(wantArena, download(arena, layout.arenaBytes)));
    }
  }
  EXPECT_EQ(fusionGatherDevice(nullptr, 0, nullptr, stream()), 0);
  EXPECT_EQ(fusionScatterDevice(nullptr, 0, nullptr, stream()), 0);
}

// ---- Reductions ----------------------------------------------------------------------------

template <typename T>
std::vector<T> reduceSpecials() {
  using Limits = std::numeric_limits<T>;
  std::vector<T> values = {T(0),
                           -T(0),
                           T(1),
                           T(-1),
                           T(1.5),
                           Limits::max(),
                           -Limits::max(),
                           Limits::infinity(),
                           -Limits::infinity(),
                           Limits::denorm_min(),
                           -Limits::denorm_min(),
                           Limits::min(),
                           Limits::quiet_NaN(),
                           -Limits::quiet_NaN()};
  if constexpr (sizeof(T) == 4) {
    values.push_back(floatFromBits(0x7fc12345u));
    values.push_back(floatFromBits(0x7f800001u));  // signalling
  } else {
    uint64_t bits = 0x7ff8000000012345ull;
    T payload;
    std::memcpy(&payload, &bits, sizeof payload);
    values.push_back(payload);
  }
  return values;
}

// inout and in of length n: every pair of specials first, then random values.
template <typename T>
void reduceInputs(size_t n, uint32_t seed, std::vector<T>* inout, std::vector<T>* in) {
  const std::vector<T> specials = reduceSpecials<T>();
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> uniform(-4.0, 4.0);
  inout->resize(n);
  in->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t pair = i;
    if (pair < specials.size() * specials.size()) {
      (*inout)[i] = specials[pair / specials.size()];
      (*in)[i] = specials[pair % specials.size()];
    } else {
      (*inout)[i] = static_cast<T>(uniform(random));
      (*in)[i] = random() % 7 == 0 ? (*inout)[i] : static_cast<T>(uniform(random));
    }
  }
}

template <typename T>
void checkReduce(GpuKernels& fixture, DType dtype) {
  for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin}) {
    for (size_t n : kLengths) {
      for (const auto& [inOffset, inoutOffset] : kOffsets) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " n=" << n
                                          << " offsets " << inOffset << "," << inoutOffset);
        std::vector<T> inout;
        std::vector<T> in;
        reduceInputs<T>(n, static_cast<uint32_t>(n + inOffset), &inout, &in);
        // Rotate so the specials also fall into a vector split's head and tail.
        if (n > 0) std::rotate(in.begin(), in.begin() + static_cast<ptrdiff_t>(n / 3), in.end());
        if (n > 0) {
          std::rotate(inout.begin(), inout.begin() + static_cast<ptrdiff_t>(n / 3), inout.end());
        }
        T* deviceIn = fixture.deviceArray<T>(n) + inOffset;
        T* deviceInout = fixture.deviceArray<T>(n) + inoutOffset;
        fixture.upload(deviceIn, in);
        fixture.upload(deviceInout, inout);
        ASSERT_EQ(reduceDevice(dtype, op, deviceIn, deviceInout, n, fixture.stream()), 0);
        std::vector<T> want(n);
        cpuReduceFn(dtype, op)(inout.data(), in.data(), want.data(), n);
        // max/min select an operand: exact bits. Sums and products of NaNs: any NaN.
        const NanRule rule =
            op == RedOp::kMax || op == RedOp::kMin ? NanRule::kBits : NanRule::kClass;
        ASSERT_TRUE(sameBits(want, fixture.download(deviceInout, n), rule));
      }
    }
  }
}

TEST_F(GpuKernels, ReduceFloatMatchesCpu) { checkReduce<float>(*this, DType::kFloat32); }

TEST_F(GpuKernels, ReduceDoubleMatchesCpu) { checkReduce<double>(*this, DType::kFloat64); }

TEST_F(GpuKernels, ReduceRejectsOtherTypesAndOps) {
  float* a = deviceArray<float>(4);
  float* b = deviceArray<float>(4);
  const int invalid = static_cast<int>(cudaErrorInvalidValue);
  EXPECT_EQ(reduceDevice(DType::kInt32, RedOp::kSum, a, b, 4, stream()), invalid);
  EXPECT_EQ(reduceDevice(DType::kFloat32, RedOp::kBitAnd, a, b, 4, stream()), invalid);
  EXPECT_EQ(reduceDevice(DType::kFloat64, RedOp::kMaxLoc, a, b, 4, stream()), invalid);
  EXPECT_EQ(reduceDevice(DType::kFloat32, RedOp::kSum, a, b, 0, stream()), 0);
  EXPECT_EQ(bitsOf(download(b, 1)[0]), 0xffffffffu);
}

// ---- Non-finite check ----------------------------------------------------------------------

TEST_F(GpuKernels, AnyNonFiniteFlagsInfAndNanAnywhere) {
  for (size_t n : kLengths) {
    for (size_t offset : {0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " offset " << offset);
      std::vector<float> data = codecInput(n, 5, /*allowNan=*/false);
      for (float& value : data) {
        if (std::isinf(value)) value = std::numeric_limits<float>::max();
      }
      float* device = deviceArray<float>(n) + offset;
      int* flag = deviceArray<int>(1);
      upload(device, data);
      ASSERT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
      ASSERT_EQ(anyNonFiniteDevice(device, n, flag, stream()), 0);
      EXPECT_EQ(download(flag, 1)[0], 0) << "finite data flagged";
      if (n == 0) continue;
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        for (uint32_t bad : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xff800001u}) {
          std::vector<float> spoiled = data;
          spoiled[at] = floatFromBits(bad);
          upload(device, spoiled);
          ASSERT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
          ASSERT_EQ(anyNonFiniteDevice(device, n, flag, stream()), 0);
          EXPECT_EQ(download(flag, 1)[0], 1) << "missed 0x" << std::hex << bad << " at " << at;
        }
      }
    }
  }
}

TEST_F(GpuKernels, EmptyCallsLaunchNothing) {
  float* f = deviceArray<float>(1);
  uint16_t* h = deviceArray<uint16_t>(1);
  int* flag = deviceArray<int>(1);
  EXPECT_EQ(encodeHalfDevice(HalfFormat::kFp16, f, 1.0f, h, 0, stream()), 0);
  EXPECT_EQ(decodeHalfDevice(HalfFormat::kBf16, h, 1.0f, f, 0, stream()), 0);
  EXPECT_EQ(anyNonFiniteDevice(f, 0, flag, stream()), 0);
  EXPECT_EQ(download(h, 1)[0], 0xffffu);
  EXPECT_EQ(bitsOf(download(f, 1)[0]), 0xffffffffu);
  EXPECT_EQ(static_cast<uint32_t>(download(flag, 1)[0]), 0xffffffffu);
}

}  // namespace
}  // namespace gfshim::cuda
