#include "algo/reducer.h"

#include <complex>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#define GFSHIM_REDUCER_X86 1
#endif

namespace gfshim {
namespace {

// One element-wise loop per operation; `Combine` is a stateless functor. Inlined into each
// instruction-set variant below, which the compiler vectorizes for its own width.
template <typename T, typename Combine>
__attribute__((always_inline)) inline void reduceLoop(const void* a, const void* b, void* out,
                                                      size_t count) {
  const T* __restrict x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) z[i] = Combine()(x[i], y[i]);
}

// The instruction-set variants: each is a set of kernels `run<T, Combine>` with the ReduceFn
// signature. Portable: what the build targets (SSE2 on x86-64).
struct PortableKernels {
  template <typename T, typename Combine>
  static void run(const void* a, const void* b, void* out, size_t count) {
    reduceLoop<T, Combine>(a, b, out, count);
  }
};

#if GFSHIM_REDUCER_X86
// AVX2 (no FMA: no operation here multiplies and adds in one step, so no contraction can make a
// result differ from the portable kernel's).
struct Avx2Kernels {
  template <typename T, typename Combine>
  __attribute__((target("avx2"))) static void run(const void* a, const void* b, void* out,
                                                  size_t count) {
    reduceLoop<T, Combine>(a, b, out, count);
  }
};
#endif

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

template <typename Kernels, typename T>
ReduceFn integerFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return Kernels::template run<T, Sum>;
    case RedOp::kProd:
      return Kernels::template run<T, Prod>;
    case RedOp::kMax:
      return Kernels::template run<T, Max>;
    case RedOp::kMin:
      return Kernels::template run<T, Min>;
    case RedOp::kLogicalAnd:
      return Kernels::template run<T, LogicalAnd>;
    case RedOp::kLogicalOr:
      return Kernels::template run<T, LogicalOr>;
    case RedOp::kLogicalXor:
      return Kernels::template run<T, LogicalXor>;
    case RedOp::kBitAnd:
      return Kernels::template run<T, BitAnd>;
    case RedOp::kBitOr:
      return Kernels::template run<T, BitOr>;
    case RedOp::kBitXor:
      return Kernels::template run<T, BitXor>;
    default:
      return nullptr;
  }
}

template <typename Kernels, typename T>
ReduceFn realFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return Kernels::template run<T, Sum>;
    case RedOp::kProd:
      return Kernels::template run<T, Prod>;
    case RedOp::kMax:
      return Kernels::template run<T, Max>;
    case RedOp::kMin:
      return Kernels::template run<T, Min>;
    default:
      return nullptr;
  }
}

template <typename Kernels, typename T>
ReduceFn complexFn(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return Kernels::template run<std::complex<T>, Sum>;
    case RedOp::kProd:
      return Kernels::template run<std::complex<T>, Prod>;
    default:
      return nullptr;
  }
}

template <typename Kernels>
ReduceFn boolFn(RedOp op) {
  switch (op) {
    case RedOp::kLogicalAnd:
      return Kernels::template run<bool, LogicalAnd>;
    case RedOp::kLogicalOr:
      return Kernels::template run<bool, LogicalOr>;
    case RedOp::kLogicalXor:
      return Kernels::template run<bool, LogicalXor>;
    default:
      return nullptr;
  }
}

template <typename Kernels>
ReduceFn byteFn(RedOp op) {
  switch (op) {
    case RedOp::kBitAnd:
      return Kernels::template run<uint8_t, BitAnd>;
    case RedOp::kBitOr:
      return Kernels::template run<uint8_t, BitOr>;
    case RedOp::kBitXor:
      return Kernels::template run<uint8_t, BitXor>;
    default:
      return nullptr;
  }
}

template <typename Kernels, typename V>
ReduceFn pairFn(RedOp op) {
  switch (op) {
    case RedOp::kMinLoc:
      return Kernels::template run<ValueIndexPair<V>, MinLoc>;
    case RedOp::kMaxLoc:
      return Kernels::template run<ValueIndexPair<V>, MaxLoc>;
    default:
      return nullptr;
  }
}

template <typename Kernels>
ReduceFn kernelFor(DType type, RedOp op) {
  switch (type) {
    case DType::kInt8:
      return integerFn<Kernels, int8_t>(op);
    case DType::kInt16:
      return integerFn<Kernels, int16_t>(op);
    case DType::kInt32:
      return integerFn<Kernels, int32_t>(op);
    case DType::kInt64:
      return integerFn<Kernels, int64_t>(op);
    case DType::kUInt8:
      return integerFn<Kernels, uint8_t>(op);
    case DType::kUInt16:
      return integerFn<Kernels, uint16_t>(op);
    case DType::kUInt32:
      return integerFn<Kernels, uint32_t>(op);
    case DType::kUInt64:
      return integerFn<Kernels, uint64_t>(op);
    case DType::kFloat32:
      return realFn<Kernels, float>(op);
    case DType::kFloat64:
      return realFn<Kernels, double>(op);
    case DType::kLongDouble:
      return realFn<Kernels, long double>(op);
    case DType::kComplexFloat32:
      return complexFn<Kernels, float>(op);
    case DType::kComplexFloat64:
      return complexFn<Kernels, double>(op);
    case DType::kComplexLongDouble:
      return complexFn<Kernels, long double>(op);
    case DType::kBool:
      return boolFn<Kernels>(op);
    case DType::kByte:
      return byteFn<Kernels>(op);
    case DType::kFloatInt:
      return pairFn<Kernels, float>(op);
    case DType::kDoubleInt:
      return pairFn<Kernels, double>(op);
    case DType::kLongInt:
      return pairFn<Kernels, long>(op);
    case DType::kIntInt:
      return pairFn<Kernels, int>(op);
    case DType::kShortInt:
      return pairFn<Kernels, short>(op);
    case DType::kLongDoubleInt:
      return pairFn<Kernels, long double>(op);
    case DType::kCount:
      break;
  }
  return nullptr;
}

#if GFSHIM_REDUCER_X86
bool detectAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#else
bool detectAvx2() { return false; }
#endif

bool useAvx2(ReducePath path) {
  static const bool available = detectAvx2();
  return path != ReducePath::kPortable && available;
}

}  // namespace

const char* reduceImplementation() { return useAvx2(ReducePath::kAuto) ? "avx2" : "portable"; }

ReduceFn cpuReduceFn(DType type, RedOp op, ReducePath path) {
#if GFSHIM_REDUCER_X86
  if (useAvx2(path)) return kernelFor<Avx2Kernels>(type, op);
#endif
  return kernelFor<PortableKernels>(type, op);
}

}  // namespace gfshim
