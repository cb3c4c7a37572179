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
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat32,
  kFloat64,
  kLongDouble,
  kComplexFloat32,
  kComplexFloat64,
  kComplexLongDouble,
  kBool,  // C _Bool (MPI_C_BOOL)
  kByte,  // MPI_BYTE: bitwise ops only
  kFloatInt,
  kDoubleInt,
  kLongInt,
  kIntInt,
  kShortInt,
  kLongDoubleInt,
  kCount
};

enum class RedOp : uint8_t {
  kSum,
  kProd,
  kMax,
  kMin,
  kLogicalAnd,
  kLogicalOr,
  kLogicalXor,
  kBitAnd,
  kBitOr,
  kBitXor,
  kMinLoc,
  kMaxLoc,
  kCount
};

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
