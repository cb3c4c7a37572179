#include "compress/half_codec.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GFSHIM_HALF_CODEC_X86 1
#define GFSHIM_TARGET_AVX2_F16C __attribute__((target("avx2,f16c")))
#endif

// This file is compiled with -ffp-contract=off (CMakeLists.txt): decodeAdd's product and sum must
// stay two roundings on every path, or the scalar path would disagree with the SIMD one.

namespace gfshim {
namespace {

uint32_t floatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float bitsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// ---- Scalar reference path: integer code, exactly what the F16C instructions compute ----------

uint16_t fp16FromFloat(float value) {
  const uint32_t bits = floatBits(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, top 10 payload bits (VCVTPS2PH)
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520, Inf
  if (magnitude >= 0x38800000u) {  // >= 2^-14: fp16 normal; rebias, round the 13 dropped bits
    const uint32_t odd = (magnitude >> 13) & 1u;
    const uint32_t rounded = magnitude - (112u << 23) + 0xfffu + odd;
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // fp16 subnormal or zero: the result counts units of 2^-24. value = significand * 2^(e-150)
  // (fp32 subnormals: e = 1 without the implicit bit), so the code is significand >> (126 - e).
  const uint32_t exponent = magnitude >> 23;
  const uint32_t significand = (magnitude & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
  const uint32_t shift = 126u - (exponent != 0 ? exponent : 1u);  // >= 14 here
  if (shift > 24) return sign;                                    // below 2^-25: rounds to zero
  uint32_t code = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (code & 1u) != 0)) ++code;  // may carry into 2^-14: fine
  return static_cast<uint16_t>(sign | code);
}

float floatFromFp16(uint16_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x8000u) << 16;
  const uint32_t exponent = (code >> 10) & 0x1fu;
  uint32_t mantissa = code & 0x3ffu;
  if (exponent == 0x1f) {  // Inf, or NaN made quiet (VCVTPH2PS)
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u));
  }
  if (exponent != 0) return bitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bitsFloat(sign);
  // Subnormal: mantissa * 2^-24, normalized.
  uint32_t biased = 113;  // exponent of 2^-14, the subnormals' scale
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --biased;
  }
  return bitsFloat(sign | (biased << 23) | ((mantissa & 0x3ffu) << 13));
}

uint16_t bf16FromFloat(float value) {
  const uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float floatFromBf16(uint16_t code) { return bitsFloat(static_cast<uint32_t>(code) << 16); }

void encodeScalar(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n) {
  if (format == HalfFormat::kFp16) {
    for (size_t i = 0; i < n; ++i) out[i] = fp16FromFloat(in[i] * scale);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = bf16FromFloat(in[i] * scale);
  }
}

void decodeScalar(HalfFormat format, const uint16_t* in, float* out, size_t n) {
  if (format == HalfFormat::kFp16) {
    for (size_t i = 0; i < n; ++i) out[i] = floatFromFp16(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = floatFromBf16(in[i]);
  }
}

void decodeAddScalar(HalfFormat format, const uint16_t* wire, const float* local, float scale,
                     float* out, size_t n) {
  if (format == HalfFormat::kFp16) {
    for (size_t i = 0; i < n; ++i) {
      const float product = local[i] * scale;
      out[i] = floatFromFp16(wire[i]) + product;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float product = local[i] * scale;
      out[i] = floatFromBf16(wire[i]) + product;
    }
  }
}

// ---- SIMD path: 8 elements per vector, the rest through the scalar code -----------------------
#if GFSHIM_HALF_CODEC_X86

// fp32 -> bf16 of 8 values in the low 16 bits of each 32-bit lane; same rule as bf16FromFloat.
GFSHIM_TARGET_AVX2_F16C inline __m256i bf16FromFloat8(__m256 values) {
  const __m256i bits = _mm256_castps_si256(values);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quietNan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i isNan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quietNan, isNan);
}

GFSHIM_TARGET_AVX2_F16C inline __m256 floatFromBf16x8(const uint16_t* in) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(codes), 16));
}

GFSHIM_TARGET_AVX2_F16C inline __m256 floatFromFp16x8(const uint16_t* in) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
}

GFSHIM_TARGET_AVX2_F16C void encodeFp16Simd(const float* in, float scale, uint16_t* out, size_t n) {
  const __m256 factor = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(in + i), factor);
    const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(in + i + 8), factor);
    const __m256 c = _mm256_mul_ps(_mm256_loadu_ps(in + i + 16), factor);
    const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(in + i + 24), factor);
    auto* o = reinterpret_cast<__m128i*>(out + i);
    _mm_storeu_si128(o, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(o + 1, _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(o + 2, _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(o + 3, _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(in + i), factor);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
  }
  encodeScalar(HalfFormat::kFp16, in + i, scale, out + i, n - i);
}

GFSHIM_TARGET_AVX2_F16C void encodeBf16Simd(const float* in, float scale, uint16_t* out, size_t n) {
  const __m256 factor = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16FromFloat8(_mm256_mul_ps(_mm256_loadu_ps(in + i), factor));
    const __m256i b = bf16FromFloat8(_mm256_mul_ps(_mm256_loadu_ps(in + i + 8), factor));
    // packus works per 128-bit lane: a0-3 b0-3 | a4-7 b4-7; the permute puts the quarters in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i a = bf16FromFloat8(_mm256_mul_ps(_mm256_loadu_ps(in + i), factor));
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  encodeScalar(HalfFormat::kBf16, in + i, scale, out + i, n - i);
}

GFSHIM_TARGET_AVX2_F16C void decodeFp16Simd(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(out + i, floatFromFp16x8(in + i));
    _mm256_storeu_ps(out + i + 8, floatFromFp16x8(in + i + 8));
    _mm256_storeu_ps(out + i + 16, floatFromFp16x8(in + i + 16));
    _mm256_storeu_ps(out + i + 24, floatFromFp16x8(in + i + 24));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, floatFromFp16x8(in + i));
  decodeScalar(HalfFormat::kFp16, in + i, out + i, n - i);
}

GFSHIM_TARGET_AVX2_F16C void decodeBf16Simd(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, floatFromBf16x8(in + i));
  decodeScalar(HalfFormat::kBf16, in + i, out + i, n - i);
}

GFSHIM_TARGET_AVX2_F16C void decodeAddFp16Simd(const uint16_t* wire, const float* local,
                                               float scale, float* out, size_t n) {
  const __m256 factor = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 product = _mm256_mul_ps(_mm256_loadu_ps(local + i), factor);
    _mm256_storeu_ps(out + i, _mm256_add_ps(floatFromFp16x8(wire + i), product));
  }
  decodeAddScalar(HalfFormat::kFp16, wire + i, local + i, scale, out + i, n - i);
}

GFSHIM_TARGET_AVX2_F16C void decodeAddBf16Simd(const uint16_t* wire, const float* local,
                                               float scale, float* out, size_t n) {
  const __m256 factor = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 product = _mm256_mul_ps(_mm256_loadu_ps(local + i), factor);
    _mm256_storeu_ps(out + i, _mm256_add_ps(floatFromBf16x8(wire + i), product));
  }
  decodeAddScalar(HalfFormat::kBf16, wire + i, local + i, scale, out + i, n - i);
}

bool detectSimd() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

#else
bool detectSimd() { return false; }
#endif

}  // namespace

const char* halfFormatName(HalfFormat format) {
  return format == HalfFormat::kFp16 ? "fp16" : "bf16";
}

bool halfCodecSimdAvailable() {
  static const bool available = detectSimd();
  return available;
}

#if GFSHIM_HALF_CODEC_X86
static bool useSimd(HalfCodecPath path) {
  return path != HalfCodecPath::kScalar && halfCodecSimdAvailable();
}
#endif

const char* halfCodecImplementation() { return halfCodecSimdAvailable() ? "f16c+avx2" : "scalar"; }

void encodeHalf(HalfCodecPath path, HalfFormat format, const float* in, float scale, uint16_t* out,
                size_t n) {
#if GFSHIM_HALF_CODEC_X86
  if (useSimd(path)) {
    if (format == HalfFormat::kFp16) return encodeFp16Simd(in, scale, out, n);
    return encodeBf16Simd(in, scale, out, n);
  }
#endif
  (void)path;
  encodeScalar(format, in, scale, out, n);
}

void decodeHalf(HalfCodecPath path, HalfFormat format, const uint16_t* in, float* out, size_t n) {
#if GFSHIM_HALF_CODEC_X86
  if (useSimd(path)) {
    if (format == HalfFormat::kFp16) return decodeFp16Simd(in, out, n);
    return decodeBf16Simd(in, out, n);
  }
#endif
  (void)path;
  decodeScalar(format, in, out, n);
}

void decodeAdd(HalfCodecPath path, HalfFormat format, const uint16_t* wire, const float* local,
               float scale, float* out, size_t n) {
#if GFSHIM_HALF_CODEC_X86
  if (useSimd(path)) {
    if (format == HalfFormat::kFp16) return decodeAddFp16Simd(wire, local, scale, out, n);
    return decodeAddBf16Simd(wire, local, scale, out, n);
  }
#endif
  (void)path;
  decodeAddScalar(format, wire, local, scale, out, n);
}

void encodeHalf(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n) {
  encodeHalf(HalfCodecPath::kAuto, format, in, scale, out, n);
}

void decodeHalf(HalfFormat format, const uint16_t* in, float* out, size_t n) {
  decodeHalf(HalfCodecPath::kAuto, format, in, out, n);
}

void decodeAdd(HalfFormat format, const uint16_t* wire, const float* local, float scale, float* out,
               size_t n) {
  decodeAdd(HalfCodecPath::kAuto, format, wire, local, scale, out, n);
}

}  // namespace gfshim
