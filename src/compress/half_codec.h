// fp16 / bf16 wire codec: converts fp32 buffers to 16-bit values for the compressed allreduce and
// back (DESIGN.md, "Compression").
//
// What each function computes, per element, always in fp32 and bit-exactly the same on every path
// (so ranks on different CPUs agree on every bit):
//
//   encodeHalf   out = to16(in * scale)            round to nearest, ties to even
//   decodeHalf   out = from16(in)                  exact
//   decodeAdd    out = from16(wire) + local*scale  two fp32 operations (product rounded, then the
//                                                  sum), never fused into an FMA
//
// Rounding and special values of to16:
//   fp16  |x| >= 65520 (the tie between 65504 and 2^16) becomes ±Inf; results below 2^-14 become
//         fp16 subnormals (smallest 2^-24, |x| <= 2^-25 becomes ±0); fp32 subnormal inputs
//         become ±0; ±0 and ±Inf keep their sign.
//   bf16  the upper 16 bits of fp32, rounded to nearest even, overflow carrying into ±Inf and fp32
//         subnormals rounded like any other value.
//   NaN   stays NaN with its sign, made quiet, payload truncated to its top bits: fp16
//         sign|0x7e00|mantissa>>13, bf16 (bits>>16)|0x0040. The fp16 rule is what the F16C
//         instruction VCVTPS2PH produces; the scalar path is written to match it.
//   from16 is exact; an fp16 signalling NaN comes back quiet (as VCVTPH2PS does), which never
//   matters on the wire because to16 only produces quiet NaNs: from16 then to16 is the identity
//   on every code to16 can produce.
//   scale 1.0f is an exact identity (x*1 == x for every non-NaN fp32), so no rounding is added.
// A NaN scale together with a NaN input may give either NaN's payload. The default MXCSR state is
// assumed (round to nearest, no FTZ/DAZ), as everywhere in the library.
//
// Paths: "f16c+avx2" (VCVTPS2PH/VCVTPH2PS for fp16, AVX2 integer rounding for bf16, 8 elements at
// a time; chosen at run time with __builtin_cpu_supports) and "scalar" (portable integer code).
// Tails shorter than a vector run through the scalar code, so the two must agree and the unit tests
// check that they do. Cost: each function reads and writes each element once; the SIMD path runs
// near memory bandwidth (bench/codec_bench.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gfshim {

enum class HalfFormat { kFp16, kBf16 };

// "fp16" or "bf16".
const char* halfFormatName(HalfFormat format);

// Which implementation runs. kAuto is the best the CPU supports; kSimd falls back to kScalar on a
// CPU without AVX2 and F16C. The explicit paths exist for tests and benchmarks.
enum class HalfCodecPath { kAuto, kScalar, kSimd };

// True when this CPU runs the SIMD path.
bool halfCodecSimdAvailable();
// The path kAuto takes on this CPU: "f16c+avx2" or "scalar".
const char* halfCodecImplementation();

// out[i] = to16(in[i] * scale). `out` must not overlap `in`.
void encodeHalf(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n);
// out[i] = from16(in[i]). `out` must not overlap `in`.
void decodeHalf(HalfFormat format, const uint16_t* in, float* out, size_t n);
// out[i] = from16(wire[i]) + local[i] * scale. `out` may alias `local` exactly, nothing else.
void decodeAdd(HalfFormat format, const uint16_t* wire, const float* local, float scale, float* out,
               size_t n);

// The same, on an explicit path.
void encodeHalf(HalfCodecPath path, HalfFormat format, const float* in, float scale, uint16_t* out,
                size_t n);
void decodeHalf(HalfCodecPath path, HalfFormat format, const uint16_t* in, float* out, size_t n);
void decodeAdd(HalfCodecPath path, HalfFormat format, const uint16_t* wire, const float* local,
               float scale, float* out, size_t n);

}  // namespace gfshim
