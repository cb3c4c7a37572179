#include "common/types.h"

#include <complex>

namespace gfshim {
namespace {

enum class TypeClass { kInteger, kReal, kComplex, kLogical, kByte, kPair };

TypeClass classOf(DType type) {
  switch (type) {
    case DType::kFloat32: case DType::kFloat64: case DType::kLongDouble:
      return TypeClass::kReal;
    case DType::kComplexFloat32: case DType::kComplexFloat64: case DType::kComplexLongDouble:
      return TypeClass::kComplex;
    case DType::kBool:
      return TypeClass::kLogical;
    case DType::kByte:
      return TypeClass::kByte;
    case DType::kFloatInt: case DType::kDoubleInt: case DType::kLongInt:
    case DType::kIntInt: case DType::kShortInt: case DType::kLongDoubleInt:
      return TypeClass::kPair;
    default:
      return TypeClass::kInteger;
  }
}

}  // namespace

size_t dtypeBytes(DType type) {
  switch (type) {
    case DType::kInt8: case DType::kUInt8: case DType::kBool: case DType::kByte: return 1;
    case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt32: case DType::kUInt32: case DType::kFloat32: return 4;
    case DType::kInt64: case DType::kUInt64: case DType::kFloat64: return 8;
    case DType::kLongDouble: return sizeof(long double);
    case DType::kComplexFloat32: return sizeof(std::complex<float>);
    case DType::kComplexFloat64: return sizeof(std::complex<double>);
    case DType::kComplexLongDouble: return sizeof(std::complex<long double>);
    case DType::kFloatInt: return sizeof(ValueIndexPair<float>);
    case DType::kDoubleInt: return sizeof(ValueIndexPair<double>);
    case DType::kLongInt: return sizeof(ValueIndexPair<long>);
    case DType::kIntInt: return sizeof(ValueIndexPair<int>);
    case DType::kShortInt: return sizeof(ValueIndexPair<short>);
    case DType::kLongDoubleInt: return sizeof(ValueIndexPair<long double>);
    case DType::kCount: break;
  }
  return 0;
}

const char* dtypeName(DType type) {
  static const char* const kNames[] = {
      "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
      "float", "double", "long_double", "complex_float", "complex_double",
      "complex_long_double", "bool", "byte", "float_int", "double_int", "long_int", "2int",
      "short_int", "long_double_int"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(DType::kCount));
  return type < DType::kCount ? kNames[static_cast<size_t>(type)] : "?";
}

const char* redOpName(RedOp op) {
  static const char* const kNames[] = {"sum",  "prod", "max",  "min",  "land",   "lor",
                                       "lxor", "band", "bor",  "bxor", "minloc", "maxloc"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(RedOp::kCount));
  return op < RedOp::kCount ? kNames[static_cast<size_t>(op)] : "?";
}

bool opAllowedOn(RedOp op, DType type) {
  const TypeClass cls = classOf(type);
  switch (op) {
    case RedOp::kMax: case RedOp::kMin:
      return cls == TypeClass::kInteger || cls == TypeClass::kReal;
    case RedOp::kSum: case RedOp::kProd:
      return cls == TypeClass::kInteger || cls == TypeClass::kReal || cls == TypeClass::kComplex;
    case RedOp::kLogicalAnd: case RedOp::kLogicalOr: case RedOp::kLogicalXor:
      return cls == TypeClass::kInteger || cls == TypeClass::kLogical;
    case RedOp::kBitAnd: case RedOp::kBitOr: case RedOp::kBitXor:
      return cls == TypeClass::kInteger || cls == TypeClass::kByte;
    case RedOp::kMinLoc: case RedOp::kMaxLoc:
      return cls == TypeClass::kPair;
    case RedOp::kCount: break;
  }
  return false;
}

}  // namespace gfshim
