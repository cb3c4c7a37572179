#include "common/types.h"

namespace gfshim {

const char* dtypeName(DType type) {
  static const char* const kNames[] = {"int8",           "int16",
                                       "int32",          "int64",
                                       "uint8",          "uint16",
                                       "uint32",         "uint64",
                                       "float",          "double",
                                       "long_double",    "complex_float",
                                       "complex_double", "complex_long_double",
                                       "bool",           "byte",
                                       "float_int",      "double_int",
                                       "long_int",       "2int",
                                       "short_int",      "long_double_int"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(DType::kCount));
  return type < DType::kCount ? kNames[static_cast<size_t>(type)] : "?";
}

const char* redOpName(RedOp op) {
  static const char* const kNames[] = {"sum",  "prod", "max", "min",  "land",   "lor",
                                       "lxor", "band", "bor", "bxor", "minloc", "maxloc"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(RedOp::kCount));
  return op < RedOp::kCount ? kNames[static_cast<size_t>(op)] : "?";
}

}  // namespace gfshim
