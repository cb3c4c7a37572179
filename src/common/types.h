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
  kInt8, kInt16, kInt32, kInt64,
  kUInt8, kUInt16, kUInt32, kUInt64,
  kFloat32, kFloat64, kLongDouble,
  kComplexFloat32, kComplexFloat64, kComplexLongDouble,
  kBool,   // C _Bool (MPI_C_BOOL)
  kByte,   // MPI_BYTE: bitwise ops only
  kFloatInt, kDoubleInt, kLongInt, kIntInt, kShortInt, kLongDoubleInt,
  kCount
};

enum class RedOp : uint8_t {
  kSum, kProd, kMax, kMin,
  kLogicalAnd, kLogicalOr, kLogicalXor,
  kBitAnd, kBitOr, kBitXor,
  kMinLoc, kMaxLoc,
  kCount
};

enum class MemKind : uint8_t { kHost, kDevice };

// The C layout of MPI's MINLOC/MAXLOC pair types (MPI_FLOAT_INT is ValueIndexPair<float>, ...).
template <typename Value>
struct ValueIndexPair {
  Value value;
  int index;
};

// Bytes per element in memory (the extent; equals the MPI type size except for padded pairs).
size_t dtypeBytes(DType type);
const char* dtypeName(DType type);
const char* redOpName(RedOp op);

// Whether the MPI standard (3.1, section 5.9.2) allows `op` on `type`: MAX/MIN on integers and
// reals; SUM/PROD also on complex; logical ops on integers and C_BOOL; bitwise ops on integers
// and BYTE; MINLOC/MAXLOC on the pair types. Other combinations are erroneous calls the engine
// leaves to the MPI.
bool opAllowedOn(RedOp op, DType type);

}  // namespace gfshim
