#include "algo/reducer.h"

#include <complex>
#include <cstdint>
#include <type_traits>

namespace gfshim {
namespace {

// One element-wise kernel per operation; `Combine` is a stateless functor.
template <typename T, typename Combine>
void reduceKernel(const void* a, const void* b, void* out, size_t count) {
  const T* __restrict x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) z[i] = Combine()(x[i], y[i]);
}

// Integer SUM and PROD wrap around, as MPI implementations do: computed in an unsigned type at
// least as wide as int (signed overflow, and int promotion of narrow unsigned types, would be
// undefined behaviour), then converted back.
template <typename T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>>
struct WrapTypeOf {
  using type = T;
};
template <typename T>
struct WrapTypeOf<T, true> {
  using type = std::make_unsigned_t<std::common_type_t<T, unsigned>>;
};
template <typename T>
using WrapType = typename WrapTypeOf<T>::type;

struct Sum {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>(static_cast<WrapType<T>>(x) + static_cast<WrapType<T>>(y));
  }
};
struct Prod {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>(static_cast<WrapType<T>>(x) * static_cast<WrapType<T>>(y));
  }
};
struct Max {
  template <typename T>
  T operator()(T x, T y) const {
    return x > y ? x : y;
  }
};
struct Min {
  template <typename T>
  T operator()(T x, T y) const {
    return x < y ? x : y;
  }
};
struct LogicalAnd {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>((x != 0) && (y != 0));
  }
};
struct LogicalOr {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>((x != 0) || (y != 0));
  }
};
struct LogicalXor {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>((x != 0) != (y != 0));
  }
};
struct BitAnd {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>(x & y);
  }
};
struct BitOr {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>(x | y);
  }
};
struct BitXor {
  template <typename T>
  T operator()(T x, T y) const {
    return static_cast<T>(x ^ y);
  }
};
// MPI 3.1 section 5.9.4: the smaller (larger) value wins; on equal values the smaller index.
struct MinLoc {
  template <typename P>
  P operator()(P x, P y) const {
    if (x.value < y.value) return x;
    if (y.value < x.value) return y;
    return x.index < y.index ? x : y;
  }
};
struct MaxLoc {
  template <typename P>
  P operator()(P x, P y) const {
    if (x.value > y.value) return x;
    if (y.value > x.value) return y;
    return x.index < y.index ? x : y;
  }
};

template <typename T>
ReduceFn integerFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return reduceKernel<T, Sum>;
    case RedOp::kProd:
      return reduceKernel<T, Prod>;
    case RedOp::kMax:
      return reduceKernel<T, Max>;
    case RedOp::kMin:
      return reduceKernel<T, Min>;
    case RedOp::kLogicalAnd:
      return reduceKernel<T, LogicalAnd>;
    case RedOp::kLogicalOr:
      return reduceKernel<T, LogicalOr>;
    case RedOp::kLogicalXor:
      return reduceKernel<T, LogicalXor>;
    case RedOp::kBitAnd:
      return reduceKernel<T, BitAnd>;
    case RedOp::kBitOr:
      return reduceKernel<T, BitOr>;
    case RedOp::kBitXor:
      return reduceKernel<T, BitXor>;
    default:
      return nullptr;
  }
}

template <typename T>
ReduceFn realFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return reduceKernel<T, Sum>;
    case RedOp::kProd:
      return reduceKernel<T, Prod>;
    case RedOp::kMax:
      return reduceKernel<T, Max>;
    case RedOp::kMin:
      return reduceKernel<T, Min>;
    default:
      return nullptr;
  }
}

template <typename T>
ReduceFn complexFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return reduceKernel<std::complex<T>, Sum>;
    case RedOp::kProd:
      return reduceKernel<std::complex<T>, Prod>;
    default:
      return nullptr;
  }
}

ReduceFn boolFn(RedOp op) {
  switch (op) {
    case RedOp::kLogicalAnd:
      return reduceKernel<bool, LogicalAnd>;
    case RedOp::kLogicalOr:
      return reduceKernel<bool, LogicalOr>;
    case RedOp::kLogicalXor:
      return reduceKernel<bool, LogicalXor>;
    default:
      return nullptr;
  }
}

ReduceFn byteFn(RedOp op) {
  switch (op) {
    case RedOp::kBitAnd:
      return reduceKernel<uint8_t, BitAnd>;
    case RedOp::kBitOr:
      return reduceKernel<uint8_t, BitOr>;
    case RedOp::kBitXor:
      return reduceKernel<uint8_t, BitXor>;
    default:
      return nullptr;
  }
}

template <typename V>
ReduceFn pairFn(RedOp op) {
  switch (op) {
    case RedOp::kMinLoc:
      return reduceKernel<ValueIndexPair<V>, MinLoc>;
    case RedOp::kMaxLoc:
      return reduceKernel<ValueIndexPair<V>, MaxLoc>;
    default:
      return nullptr;
  }
}

}  // namespace

ReduceFn cpuReduceFn(DType type, RedOp op) {
  switch (type) {
    case DType::kInt8:
      return integerFn<int8_t>(op);
    case DType::kInt16:
      return integerFn<int16_t>(op);
    case DType::kInt32:
      return integerFn<int32_t>(op);
    case DType::kInt64:
      return integerFn<int64_t>(op);
    case DType::kUInt8:
      return integerFn<uint8_t>(op);
    case DType::kUInt16:
      return integerFn<uint16_t>(op);
    case DType::kUInt32:
      return integerFn<uint32_t>(op);
    case DType::kUInt64:
      return integerFn<uint64_t>(op);
    case DType::kFloat32:
      return realFn<float>(op);
    case DType::kFloat64:
      return realFn<double>(op);
    case DType::kLongDouble:
      return realFn<long double>(op);
    case DType::kComplexFloat32:
      return complexFn<float>(op);
    case DType::kComplexFloat64:
      return complexFn<double>(op);
    case DType::kComplexLongDouble:
      return complexFn<long double>(op);
    case DType::kBool:
      return boolFn(op);
    case DType::kByte:
      return byteFn(op);
    case DType::kFloatInt:
      return pairFn<float>(op);
    case DType::kDoubleInt:
      return pairFn<double>(op);
    case DType::kLongInt:
      return pairFn<long>(op);
    case DType::kIntInt:
      return pairFn<int>(op);
    case DType::kShortInt:
      return pairFn<short>(op);
    case DType::kLongDoubleInt:
      return pairFn<long double>(op);
    case DType::kCount:
      break;
  }
  return nullptr;
}

}  // namespace gfshim
