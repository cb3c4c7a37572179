// Plain C++ descriptions of what an allreduce moves, so algorithms, codecs and the policy never
// see mpi.h. hooks/ translates MPI handles into these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gfshim {

// Element types the engine reduces itself. Pair types are the C structs MPI defines for
// MINLOC/MAXLOC ({float,int}, ...); their size includes the struct padding, i.e. it is the
// datatype's extent, which is the stride between elements in user memory.
enum class DType : uint8_t {
  kInt8 = 0,
  kInt16 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kUInt8 = 4,
  kUInt16 = 5,
  kUInt32 = 6,
  kUInt64 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kLongDouble = 10,
  kComplexFloat32 = 11,
  kComplexFloat64 = 12,
  kComplexLongDouble = 13,
  kBool = 14,  // C _Bool (MPI_C_BOOL)
  kByte = 15,  // MPI_BYTE: bitwise ops only
  kFloatInt = 16,
  kDoubleInt = 17,
  kLongInt = 18,
  kIntInt = 19,
  kShortInt = 20,
  kLongDoubleInt = 21,
  kCount
};

enum class RedOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
  kLogicalAnd = 4,
  kLogicalOr = 5,
  kLogicalXor = 6,
  kBitAnd = 7,
  kBitOr = 8,
  kBitXor = 9,
  kMinLoc = 10,
  kMaxLoc = 11,
  kCount
};

// DType and RedOp cross the GPU plugin ABI (GpuCall, GpuFusedCall and supports() in
// src/gpu/gpu_plugin_api.h), and the tables below are indexed by value, so the values are pinned
// (dense from 0): reordering the lines changes none of them, and the checks catch a kCount that
// moved. A new one takes the next value, before kCount, with a new kGpuPluginAbiVersion and the
// count here.
static_assert(sizeof(DType) == 1 && static_cast<int>(DType::kCount) == 22,
              "DType's values are part of the GPU plugin ABI");
static_assert(sizeof(RedOp) == 1 && static_cast<int>(RedOp::kCount) == 12,
              "RedOp's values are part of the GPU plugin ABI");

enum class MemKind : uint8_t { kHost, kDevice };

// The C layout of MPI's MINLOC/MAXLOC pair types (MPI_FLOAT_INT is ValueIndexPair<float>, ...).
template <typename Value>
struct ValueIndexPair {
  Value value;
  int index;
};

namespace detail {
// Inline tables: these run on every intercepted call, including tiny pass-throughs.
constexpr uint8_t kDTypeBytes[] = {1,
                                   2,
                                   4,
                                   8,  // int8..int64
                                   1,
                                   2,
                                   4,
                                   8,  // uint8..uint64
                                   4,
                                   8,
                                   sizeof(long double),  // float, double, long double
                                   8,
                                   16,
                                   2 * sizeof(long double),  // complex float/double/long double
                                   1,
                                   1,  // bool, byte
                                   sizeof(ValueIndexPair<float>),
                                   sizeof(ValueIndexPair<double>),
                                   sizeof(ValueIndexPair<long>),
                                   sizeof(ValueIndexPair<int>),
                                   sizeof(ValueIndexPair<short>),
                                   sizeof(ValueIndexPair<long double>)};
static_assert(sizeof(kDTypeBytes) == static_cast<size_t>(DType::kCount));

enum TypeClassBit : uint8_t {
  kInteger = 1,
  kReal = 2,
  kComplex = 4,
  kLogical = 8,
  kByteClass = 16,
  kPair = 32
};
constexpr uint8_t kDTypeClass[] = {kInteger, kInteger, kInteger, kInteger,   kInteger, kInteger,
                                   kInteger, kInteger, kReal,    kReal,      kReal,    kComplex,
                                   kComplex, kComplex, kLogical, kByteClass, kPair,    kPair,
                                   kPair,    kPair,    kPair,    kPair};
static_assert(sizeof(kDTypeClass) == static_cast<size_t>(DType::kCount));

// MPI 3.1 section 5.9.2: MAX/MIN on integers and reals; SUM/PROD also on complex; logical ops
// on integers and C_BOOL; bitwise ops on integers and BYTE; MINLOC/MAXLOC on the pair types.
constexpr uint8_t kOpAllowedClasses[] = {kInteger | kReal | kComplex,
                                         kInteger | kReal | kComplex,  // sum, prod
                                         kInteger | kReal,
                                         kInteger | kReal,  // max, min
                                         kInteger | kLogical,
                                         kInteger | kLogical,
                                         kInteger | kLogical,
                                         kInteger | kByteClass,
                                         kInteger | kByteClass,
                                         kInteger | kByteClass,
                                         kPair,
                                         kPair};
static_assert(sizeof(kOpAllowedClasses) == static_cast<size_t>(RedOp::kCount));
}  // namespace detail

// Bytes per element in memory (the extent; equals the MPI type size except for padded pairs).
inline size_t dtypeBytes(DType type) { return detail::kDTypeBytes[static_cast<size_t>(type)]; }

// Whether the MPI standard allows `op` on `type` (see kOpAllowedClasses). Other combinations are
// erroneous calls the engine leaves to the MPI.
inline bool opAllowedOn(RedOp op, DType type) {
  return (detail::kOpAllowedClasses[static_cast<size_t>(op)] &
          detail::kDTypeClass[static_cast<size_t>(type)]) != 0;
}

const char* dtypeName(DType type);
const char* redOpName(RedOp op);

}  // namespace gfshim
