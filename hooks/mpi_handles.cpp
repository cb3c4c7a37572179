#include "hooks/mpi_handles.h"

#include <cstdint>

namespace gfshim::hooks {
namespace {

template <typename T>
constexpr DType integerDType() {
  static_assert(std::is_integral_v<T>);
  if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? DType::kInt8 : DType::kUInt8;
  if constexpr (sizeof(T) == 2) return std::is_signed_v<T> ? DType::kInt16 : DType::kUInt16;
  if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? DType::kInt32 : DType::kUInt32;
  return std::is_signed_v<T> ? DType::kInt64 : DType::kUInt64;
}

struct DTypeEntry {
  MPI_Datatype handle;
  DType type;
};

// Most frequent first: the lookup is a linear scan on every call.
const DTypeEntry kDTypes[] = {
    {MPI_FLOAT, DType::kFloat32},
    {MPI_DOUBLE, DType::kFloat64},
    {MPI_INT, integerDType<int>()},
    {MPI_LONG, integerDType<long>()},
    {MPI_LONG_LONG, integerDType<long long>()},
    {MPI_LONG_LONG_INT, integerDType<long long>()},
    {MPI_INT32_T, DType::kInt32},
    {MPI_INT64_T, DType::kInt64},
    {MPI_UNSIGNED, integerDType<unsigned>()},
    {MPI_UNSIGNED_LONG, integerDType<unsigned long>()},
    {MPI_UNSIGNED_LONG_LONG, integerDType<unsigned long long>()},
    {MPI_SHORT, integerDType<short>()},
    {MPI_UNSIGNED_SHORT, integerDType<unsigned short>()},
    {MPI_SIGNED_CHAR, DType::kInt8},
    {MPI_UNSIGNED_CHAR, DType::kUInt8},
    {MPI_INT8_T, DType::kInt8},
    {MPI_INT16_T, DType::kInt16},
    {MPI_UINT8_T, DType::kUInt8},
    {MPI_UINT16_T, DType::kUInt16},
    {MPI_UINT32_T, DType::kUInt32},
    {MPI_UINT64_T, DType::kUInt64},
    {MPI_AINT, integerDType<MPI_Aint>()},
    {MPI_OFFSET, integerDType<MPI_Offset>()},
    {MPI_COUNT, integerDType<MPI_Count>()},
    {MPI_LONG_DOUBLE, DType::kLongDouble},
    {MPI_C_FLOAT_COMPLEX, DType::kComplexFloat32},
    {MPI_C_COMPLEX, DType::kComplexFloat32},
    {MPI_C_DOUBLE_COMPLEX, DType::kComplexFloat64},
    {MPI_C_LONG_DOUBLE_COMPLEX, DType::kComplexLongDouble},
    {MPI_C_BOOL, DType::kBool},
    {MPI_BYTE, DType::kByte},
    {MPI_FLOAT_INT, DType::kFloatInt},
    {MPI_DOUBLE_INT, DType::kDoubleInt},
    {MPI_LONG_INT, DType::kLongInt},
    {MPI_2INT, DType::kIntInt},
    {MPI_SHORT_INT, DType::kShortInt},
    {MPI_LONG_DOUBLE_INT, DType::kLongDoubleInt},
};

struct OpEntry {
  MPI_Op handle;
  RedOp op;
};

const OpEntry kOps[] = {
    {MPI_SUM, RedOp::kSum},         {MPI_MAX, RedOp::kMax},         {MPI_MIN, RedOp::kMin},
    {MPI_PROD, RedOp::kProd},       {MPI_LAND, RedOp::kLogicalAnd}, {MPI_LOR, RedOp::kLogicalOr},
    {MPI_LXOR, RedOp::kLogicalXor}, {MPI_BAND, RedOp::kBitAnd},     {MPI_BOR, RedOp::kBitOr},
    {MPI_BXOR, RedOp::kBitXor},     {MPI_MINLOC, RedOp::kMinLoc},   {MPI_MAXLOC, RedOp::kMaxLoc},
};

}  // namespace

std::optional<DType> engineDType(MPI_Datatype type) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.handle == type) return entry.type;
  }
  return std::nullopt;
}

std::optional<RedOp> engineOp(MPI_Op op) {
  for (const OpEntry& entry : kOps) {
    if (entry.handle == op) return entry.op;
  }
  return std::nullopt;
}

}  // namespace gfshim::hooks
