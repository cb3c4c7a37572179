// The fp16/bf16 codec against a reference written independently here, in double arithmetic (nearest
// representable value, ties to the even code), over boundary classes (±0, subnormals, max finite,
// overflow, Inf, NaN, rounding ties), every fp16 code, every fp16 midpoint and random data, on both
// paths; and the SIMD path bit-identical to the scalar one on every tail length.
#include "compress/half_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gfshim {
namespace {

constexpr HalfCodecPath kPaths[] = {HalfCodecPath::kScalar, HalfCodecPath::kSimd};

const char* pathName(HalfCodecPath path) {
  return path == HalfCodecPath::kScalar ? "scalar" : "simd";
}

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float floatOf(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// ---- Independent reference ----------------------------------------------------------------------

// The value of an fp16 code by its definition; NaN for NaN codes.
double fp16Value(uint16_t code) {
  const int exponent = (code >> 10) & 0x1f;
  const int mantissa = code & 0x3ff;
  const double sign = (code & 0x8000) ? -1.0 : 1.0;
  if (exponent == 31) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Values of the positive codes 0..0x7c00 in increasing order, 0x7c00 standing for 2^16: the value
// a finite fp16 would have there, which is where rounding to the nearest decides overflow.
const std::vector<double>& positiveFp16Values() {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t c = 0; c < 0x7c00; ++c) v.push_back(fp16Value(static_cast<uint16_t>(c)));
    v.push_back(65536.0);
    return v;
  }();
  return values;
}

// Nearest of two candidates, ties to the even code.
uint32_t nearest(double a, uint32_t lo, double loValue, uint32_t hi, double hiValue) {
  const double below = a - loValue;
  const double above = hiValue - a;
  if (below < above) return lo;
  if (above < below) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

uint16_t referenceFp16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  const std::vector<double>& values = positiveFp16Values();
  if (a >= 65536.0) return static_cast<uint16_t>(sign | 0x7c00);
  const size_t lo =
      static_cast<size_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
  const uint32_t code = nearest(a, static_cast<uint32_t>(lo), values[lo],
                                static_cast<uint32_t>(lo + 1), values[lo + 1]);
  return static_cast<uint16_t>(sign | code);  // code 0x7c00 is Inf
}

uint16_t referenceBf16(float x) {
  const uint32_t bits = bitsOf(x);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t lo = bits & 0x7fff0000u;  // toward zero
  const uint32_t hi = lo + 0x10000u;       // next bf16 magnitude, maybe Inf
  const double a = std::fabs(static_cast<double>(x));
  const double loValue = static_cast<double>(floatOf(lo));
  const double hiValue =
      hi >= 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(floatOf(hi));
  const uint32_t code = nearest(a, lo >> 16, loValue, hi >> 16, hiValue);
  return static_cast<uint16_t>((sign >> 16) | code);
}

bool isFp16Nan(uint16_t c) { return (c & 0x7c00) == 0x7c00 && (c & 0x3ff) != 0; }
bool isBf16Nan(uint16_t c) { return (c & 0x7f80) == 0x7f80 && (c & 0x7f) != 0; }

uint16_t encodeOne(HalfCodecPath path, HalfFormat format, float x, float scale = 1.0f) {
  uint16_t out = 0xdead;
  encodeHalf(path, format, &x, scale, &out, 1);
  return out;
}

float decodeOne(HalfCodecPath path, HalfFormat format, uint16_t code) {
  float out = -999.0f;
  decodeHalf(path, format, &code, &out, 1);
  return out;
}

// Encodes a vector in one call (the SIMD body, not only its scalar tail).
std::vector<uint16_t> encodeAll(HalfCodecPath path, HalfFormat format, const std::vector<float>& in,
                                float scale = 1.0f) {
  std::vector<uint16_t> out(in.size(), 0xdead);
  encodeHalf(path, format, in.data(), scale, out.data(), in.size());
  return out;
}

// Finite floats of every magnitude around the fp16 and bf16 ranges, plus random bit patterns.
std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      v[i] = floatOf(bits(rng));
    } else {
      const float x = std::ldexp(mantissa(rng), exponent(rng));
      v[i] = (bits(rng) & 1u) ? -x : x;
    }
  }
  return v;
}

// ---- fp16 ---------------------------------------------------------------------------------------

struct Case {
  float input;
  uint16_t expected;
};

TEST(HalfCodecFp16, BoundaryClasses) {
  const float denormMin = std::numeric_limits<float>::denorm_min();
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {std::ldexp(1.0f, -24), 0x0001},  // smallest subnormal
      {-std::ldexp(1.0f, -24), 0x8001},
      {std::ldexp(1023.0f, -24), 0x03ff},  // largest subnormal
      {std::ldexp(1.0f, -14), 0x0400},     // smallest normal
      {std::ldexp(1.0f, -25), 0x0000},     // tie between 0 and 2^-24: even is 0
      {std::nextafter(std::ldexp(1.0f, -25), 1.0f), 0x0001},
      {-std::ldexp(1.0f, -25), 0x8000},
      {std::ldexp(3.0f, -25), 0x0002},     // tie between codes 1 and 2
      {std::ldexp(5.0f, -25), 0x0002},     // tie between codes 2 and 3
      {std::ldexp(2047.0f, -25), 0x0400},  // tie between 0x3ff and 0x400: up to normal
      {65504.0f, 0x7bff},                  // max finite
      {-65504.0f, 0xfbff},
      {65519.99f, 0x7bff},  // just below the overflow tie
      {std::nextafter(65520.0f, 0.0f), 0x7bff},
      {65520.0f, 0x7c00},  // the tie rounds to "2^16": Inf
      {-65520.0f, 0xfc00},
      {1e10f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {inf, 0x7c00},
      {-inf, 0xfc00},
      {denormMin, 0x0000},  // fp32 subnormals are far below 2^-25
      {-denormMin, 0x8000},
      {std::numeric_limits<float>::min(), 0x0000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie at exponent 0: even is 1.0
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie between 0x3c01 and 0x3c02
      {2049.0f, 0x6800},                       // tie between 2048 and 2050
      {2051.0f, 0x6802},                       // tie between 2050 and 2052
      {-2051.0f, 0xe802},
      {std::ldexp(1.0f + std::ldexp(1.0f, -11), -10), 0x1400},  // tie at 2^-10
      {0.1f, 0x2e66},
      {1.0f / 3.0f, 0x3555},
  };
  for (HalfCodecPath path : kPaths) {
    for (const Case& c : cases) {
      EXPECT_EQ(encodeOne(path, HalfFormat::kFp16, c.input), c.expected)
          << pathName(path) << " input " << c.input << " (0x" << std::hex << bitsOf(c.input) << ")";
      EXPECT_EQ(referenceFp16(c.input), c.expected) << "reference disagrees on " << c.input;
    }
  }
}

TEST(HalfCodecFp16, DecodeOfEveryCodeIsItsValue) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
  for (HalfCodecPath path : kPaths) {
    std::vector<float> out(65536);
    decodeHalf(path, HalfFormat::kFp16, codes.data(), out.data(), codes.size());
    for (uint32_t c = 0; c < 65536; ++c) {
      const double expected = fp16Value(static_cast<uint16_t>(c));
      if (isFp16Nan(static_cast<uint16_t>(c))) {
        ASSERT_TRUE(std::isnan(out[c])) << pathName(path) << " code " << c;
        ASSERT_EQ(std::signbit(out[c]), (c & 0x8000) != 0);
        ASSERT_NE(bitsOf(out[c]) & 0x400000u, 0u) << "NaN not quiet, code " << c;
      } else {
        ASSERT_EQ(static_cast<double>(out[c]), expected) << pathName(path) << " code " << c;
        ASSERT_EQ(std::signbit(out[c]), (c & 0x8000) != 0) << "code " << c;
      }
    }
  }
}

TEST(HalfCodecFp16, EncodeOfDecodeIsTheIdentity) {
  for (HalfCodecPath path : kPaths) {
    std::vector<float> values(65536);
    for (uint32_t c = 0; c < 65536; ++c) values[c] = decodeOne(path, HalfFormat::kFp16, c);
    const std::vector<uint16_t> codes = encodeAll(path, HalfFormat::kFp16, values);
    for (uint32_t c = 0; c < 65536; ++c) {
      // A NaN comes back quiet: the identity on every code the encoder itself produces.
      const auto expected =
          static_cast<uint16_t>(isFp16Nan(static_cast<uint16_t>(c)) ? (c | 0x200u) : c);
      ASSERT_EQ(codes[c], expected) << pathName(path) << " code " << c;
    }
  }
}

TEST(HalfCodecFp16, EveryMidpointRoundsToTheEvenNeighbour) {
  std::vector<float> inputs;
  std::vector<uint16_t> expected;
  for (uint32_t c = 0; c < 0x7bff; ++c) {
    const double lo = fp16Value(static_cast<uint16_t>(c));
    const double hi = fp16Value(static_cast<uint16_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint not representable";
    const uint16_t even = static_cast<uint16_t>((c & 1u) == 0 ? c : c + 1);
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float m = sign ? -mid : mid;
      inputs.push_back(m);
      expected.push_back(static_cast<uint16_t>(sign | even));
      inputs.push_back(std::nextafter(m, 0.0f));
      expected.push_back(static_cast<uint16_t>(sign | c));
      inputs.push_back(std::nextafter(m, sign ? -1e30f : 1e30f));
      expected.push_back(static_cast<uint16_t>(sign | (c + 1)));
    }
  }
  for (HalfCodecPath path : kPaths) {
    const std::vector<uint16_t> codes = encodeAll(path, HalfFormat::kFp16, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(codes[i], expected[i]) << pathName(path) << " input " << inputs[i];
    }
  }
}

TEST(HalfCodecFp16, RandomFloatsMatchTheReference) {
  const std::vector<float> inputs = randomFloats(300000, 11);
  for (HalfCodecPath path : kPaths) {
    const std::vector<uint16_t> codes = encodeAll(path, HalfFormat::kFp16, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (std::isnan(inputs[i])) {
        ASSERT_TRUE(isFp16Nan(codes[i]));
        continue;
      }
      ASSERT_EQ(codes[i], referenceFp16(inputs[i]))
          << pathName(path) << " input 0x" << std::hex << bitsOf(inputs[i]);
    }
  }
}

// ---- bf16 ---------------------------------------------------------------------------------------

TEST(HalfCodecBf16, BoundaryClasses) {
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {-1.0f, 0xbf80},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},  // tie: even is 1.0
      {1.0f + std::ldexp(3.0f, -8), 0x3f82},  // tie between 0x3f81 and 0x3f82
      {floatOf(0x3f808001u), 0x3f81},
      {floatOf(0x3f817fffu), 0x3f81},
      {floatOf(0x7f7f7fffu), 0x7f7f},  // just below the tie: max finite bf16
      {floatOf(0x7f7f8000u), 0x7f80},  // tie, odd below: overflows to Inf
      {std::numeric_limits<float>::max(), 0x7f80},
      {-std::numeric_limits<float>::max(), 0xff80},
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
      {floatOf(0x00000001u), 0x0000},  // smallest fp32 subnormal
      {floatOf(0x00008000u), 0x0000},  // subnormal tie: even is 0
      {floatOf(0x00008001u), 0x0001},
      {floatOf(0x00018000u), 0x0002},  // subnormal tie between 1 and 2
      {floatOf(0x80018000u), 0x8002},
      {floatOf(0x007fffffu), 0x0080},  // largest subnormal rounds up to the smallest normal
      {std::numeric_limits<float>::min(), 0x0080},
      {0.1f, 0x3dcd},
  };
  for (HalfCodecPath path : kPaths) {
    for (const Case& c : cases) {
      EXPECT_EQ(encodeOne(path, HalfFormat::kBf16, c.input), c.expected)
          << pathName(path) << " input 0x" << std::hex << bitsOf(c.input);
      EXPECT_EQ(referenceBf16(c.input), c.expected) << "reference disagrees on " << c.input;
    }
  }
}

TEST(HalfCodecBf16, DecodeIsTheUpperHalfOfFp32AndRoundTrips) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
  for (HalfCodecPath path : kPaths) {
    std::vector<float> values(65536);
    decodeHalf(path, HalfFormat::kBf16, codes.data(), values.data(), codes.size());
    const std::vector<uint16_t> again = encodeAll(path, HalfFormat::kBf16, values);
    for (uint32_t c = 0; c < 65536; ++c) {
      ASSERT_EQ(bitsOf(values[c]), c << 16) << pathName(path);
      const auto expected =
          static_cast<uint16_t>(isBf16Nan(static_cast<uint16_t>(c)) ? (c | 0x40u) : c);
      ASSERT_EQ(again[c], expected) << pathName(path) << " code " << c;
    }
  }
}

TEST(HalfCodecBf16, RandomFloatsMatchTheReference) {
  const std::vector<float> inputs = randomFloats(300000, 12);
  for (HalfCodecPath path : kPaths) {
    const std::vector<uint16_t> codes = encodeAll(path, HalfFormat::kBf16, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (std::isnan(inputs[i])) {
        ASSERT_TRUE(isBf16Nan(codes[i]));
        continue;
      }
      ASSERT_EQ(codes[i], referenceBf16(inputs[i]))
          << pathName(path) << " input 0x" << std::hex << bitsOf(inputs[i]);
    }
  }
}

// ---- Both formats -------------------------------------------------------------------------------

TEST(HalfCodec, NanStaysAQuietNanWithItsSign) {
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                           0x7fa00000u, 0x7fffffffu, 0xffffe000u, 0x7f802000u};
  for (HalfCodecPath path : kPaths) {
    for (uint32_t bits : nans) {
      const float nan = floatOf(bits);
      const bool negative = (bits & 0x80000000u) != 0;
      const uint16_t h = encodeOne(path, HalfFormat::kFp16, nan);
      EXPECT_EQ(
          h, static_cast<uint16_t>((negative ? 0x8000u : 0u) | 0x7e00u | ((bits >> 13) & 0x3ffu)))
          << pathName(path) << std::hex << " 0x" << bits;
      const uint16_t b = encodeOne(path, HalfFormat::kBf16, nan);
      EXPECT_EQ(b, static_cast<uint16_t>((bits >> 16) | 0x40u))
          << pathName(path) << std::hex << " 0x" << bits;
      EXPECT_TRUE(isBf16Nan(b));
      for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
        const float back = decodeOne(path, format, format == HalfFormat::kFp16 ? h : b);
        EXPECT_TRUE(std::isnan(back));
        EXPECT_EQ(std::signbit(back), negative);
      }
    }
  }
}

TEST(HalfCodec, ScaleMultipliesInFp32BeforeRounding) {
  const std::vector<float> inputs = randomFloats(5000, 13);
  for (float scale : {1.0f, 0.25f, 1.0f / 3.0f, 1.0f / 7.0f, 3.0f, 1e-3f}) {
    std::vector<float> scaled(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) scaled[i] = inputs[i] * scale;
    for (HalfCodecPath path : kPaths) {
      for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
        const std::vector<uint16_t> direct = encodeAll(path, format, inputs, scale);
        const std::vector<uint16_t> twoSteps = encodeAll(path, format, scaled, 1.0f);
        ASSERT_EQ(direct, twoSteps)
            << pathName(path) << " " << halfFormatName(format) << " scale " << scale;
      }
    }
  }
}

TEST(HalfCodec, DecodeAddIsDecodePlusScaledLocalAndMayRunInPlace) {
  std::mt19937 rng(14);
  std::uniform_int_distribution<uint32_t> codeOf(0, 0xffff);
  const std::vector<float> local = randomFloats(1000, 15);
  std::vector<uint16_t> wire(local.size());
  for (uint16_t& w : wire) w = static_cast<uint16_t>(codeOf(rng));
  for (HalfCodecPath path : kPaths) {
    for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
      for (float scale : {1.0f, 0.125f, 1.0f / 3.0f}) {
        std::vector<float> decoded(wire.size()), out(wire.size());
        decodeHalf(path, format, wire.data(), decoded.data(), wire.size());
        decodeAdd(path, format, wire.data(), local.data(), scale, out.data(), wire.size());
        std::vector<float> inPlace = local;
        decodeAdd(path, format, wire.data(), inPlace.data(), scale, inPlace.data(), wire.size());
        for (size_t i = 0; i < wire.size(); ++i) {
          const float product = local[i] * scale;
          const float expected = decoded[i] + product;
          if (std::isnan(expected)) {
            ASSERT_TRUE(std::isnan(out[i]));
          } else {
            ASSERT_EQ(bitsOf(out[i]), bitsOf(expected)) << pathName(path) << " element " << i;
          }
          ASSERT_EQ(bitsOf(inPlace[i]), bitsOf(out[i])) << "in place differs at " << i;
        }
      }
    }
  }
}

// The SIMD path's vector bodies and its scalar tails give the scalar path's bits, for every length
// 0..70 and a few long ones, including NaN payloads.
TEST(HalfCodec, SimdIsBitIdenticalToScalarOnEveryLength) {
  if (!halfCodecSimdAvailable()) GTEST_SKIP() << "no AVX2+F16C on this CPU";
  std::mt19937 rng(16);
  std::uniform_int_distribution<uint32_t> codeOf(0, 0xffff);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (size_t n : {size_t{255}, size_t{1000}, size_t{4099}}) lengths.push_back(n);
  for (size_t n : lengths) {
    std::vector<float> in = randomFloats(n + 3, static_cast<uint32_t>(100 + n));
    const std::vector<float> local = randomFloats(n + 3, static_cast<uint32_t>(200 + n));
    std::vector<uint16_t> wire(n + 3);
    for (uint16_t& w : wire) w = static_cast<uint16_t>(codeOf(rng));
    for (size_t offset : {size_t{0}, size_t{3}}) {  // misaligned starts too
      const size_t count = std::min(n, in.size() - offset);
      for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
        for (float scale : {1.0f, 0.125f, 1.0f / 3.0f}) {
          SCOPED_TRACE(testing::Message() << halfFormatName(format) << " n=" << count
                                          << " offset=" << offset << " scale=" << scale);
          std::vector<uint16_t> a(count + 1, 0x5555), b(count + 1, 0x5555);
          encodeHalf(HalfCodecPath::kSimd, format, in.data() + offset, scale, a.data(), count);
          encodeHalf(HalfCodecPath::kScalar, format, in.data() + offset, scale, b.data(), count);
          ASSERT_EQ(a, b) << "encode";

          std::vector<float> x(count + 1, 7.0f), y(count + 1, 7.0f);
          decodeHalf(HalfCodecPath::kSimd, format, wire.data() + offset, x.data(), count);
          decodeHalf(HalfCodecPath::kScalar, format, wire.data() + offset, y.data(), count);
          ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "decode";

          decodeAdd(HalfCodecPath::kSimd, format, wire.data() + offset, local.data() + offset,
                    scale, x.data(), count);
          decodeAdd(HalfCodecPath::kScalar, format, wire.data() + offset, local.data() + offset,
                    scale, y.data(), count);
          ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "decodeAdd";
        }
      }
    }
  }
}

TEST(HalfCodec, ImplementationNameFollowsTheCpu) {
  EXPECT_STREQ(halfCodecImplementation(), halfCodecSimdAvailable() ? "f16c+avx2" : "scalar");
  EXPECT_STREQ(halfFormatName(HalfFormat::kFp16), "fp16");
  EXPECT_STREQ(halfFormatName(HalfFormat::kBf16), "bf16");
}

}  // namespace
}  // namespace gfshim
