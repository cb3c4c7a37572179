#include "algo/reducer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace gfshim {
namespace {

TEST(Reducer, KernelExistsExactlyForTheCombinationsMpiAllows) {
  for (int t = 0; t < static_cast<int>(DType::kCount); ++t) {
    for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) {
      const auto type = static_cast<DType>(t);
      const auto op = static_cast<RedOp>(o);
      EXPECT_EQ(cpuReduceFn(type, op) != nullptr, opAllowedOn(op, type))
          << dtypeName(type) << " " << redOpName(op);
    }
  }
}

template <typename T>
std::vector<T> reduce(DType type, RedOp op, std::vector<T> a, std::vector<T> b) {
  std::vector<T> out(a.size());
  std::memset(static_cast<void*>(out.data()), 0xA5, out.size() * sizeof(T));
  cpuReduceFn(type, op)(a.data(), b.data(), out.data(), a.size());
  return out;
}

TEST(Reducer, IntegerOps) {
  const std::vector<int32_t> a = {1, -2, 3, 0, 6};
  const std::vector<int32_t> b = {4, 5, -6, 7, 3};
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kSum, a, b), (std::vector<int32_t>{5, 3, -3, 7, 9}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kProd, a, b), (std::vector<int32_t>{4, -10, -18, 0, 18}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kMax, a, b), (std::vector<int32_t>{4, 5, 3, 7, 6}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kMin, a, b), (std::vector<int32_t>{1, -2, -6, 0, 3}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kLogicalAnd, a, b), (std::vector<int32_t>{1, 1, 1, 0, 1}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kLogicalOr, a, b), (std::vector<int32_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kLogicalXor, a, b), (std::vector<int32_t>{0, 0, 0, 1, 0}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kBitAnd, a, b),
            (std::vector<int32_t>{1 & 4, -2 & 5, 3 & -6, 0, 6 & 3}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kBitOr, a, b),
            (std::vector<int32_t>{1 | 4, -2 | 5, 3 | -6, 7, 6 | 3}));
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kBitXor, a, b),
            (std::vector<int32_t>{1 ^ 4, -2 ^ 5, 3 ^ -6, 7, 6 ^ 3}));
  // Overflow wraps around (two's complement), as MPI implementations compute it, without UB.
  EXPECT_EQ(reduce(DType::kInt32, RedOp::kSum, std::vector<int32_t>{2000000000},
                   std::vector<int32_t>{2000000000}),
            (std::vector<int32_t>{-294967296}));
  EXPECT_EQ(reduce(DType::kUInt16, RedOp::kProd, std::vector<uint16_t>{65535},
                   std::vector<uint16_t>{65535}),
            (std::vector<uint16_t>{1}));
  EXPECT_EQ(
      reduce(DType::kInt64, RedOp::kProd, std::vector<int64_t>{INT64_MAX}, std::vector<int64_t>{2}),
      (std::vector<int64_t>{-2}));
  // Unsigned wrap-around is defined and must match what MPI computes.
  EXPECT_EQ(reduce(DType::kUInt8, RedOp::kSum, std::vector<uint8_t>{250}, std::vector<uint8_t>{10}),
            (std::vector<uint8_t>{4}));
}

TEST(Reducer, FloatingOpsAndInPlaceAliasing) {
  std::vector<double> a = {1.5, -0.0, 1e300, 3.0};
  std::vector<double> b = {2.25, 0.0, 1e300, -3.0};
  EXPECT_EQ(reduce(DType::kFloat64, RedOp::kSum, a, b),
            (std::vector<double>{3.75, 0.0, 2e300, 0.0}));
  EXPECT_EQ(reduce(DType::kFloat64, RedOp::kMax, a, b)[3], 3.0);
  // out == b (in place), across a length that exercises the vector body and the tail.
  std::vector<float> x(1037), y(1037);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i);
    y[i] = static_cast<float>(2 * i);
  }
  cpuReduceFn(DType::kFloat32, RedOp::kSum)(x.data(), y.data(), y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], static_cast<float>(3 * i)) << i;
}

TEST(Reducer, ComplexAndBoolAndByte) {
  using C = std::complex<double>;
  const auto prod =
      reduce(DType::kComplexFloat64, RedOp::kProd, std::vector<C>{{1, 2}}, std::vector<C>{{3, -1}});
  EXPECT_EQ(prod[0], C(5, 5));
  const auto sum =
      reduce(DType::kComplexFloat64, RedOp::kSum, std::vector<C>{{1, 2}}, std::vector<C>{{3, -1}});
  EXPECT_EQ(sum[0], C(4, 1));
  const bool a[] = {true, true, false, false};
  const bool b[] = {true, false, true, false};
  bool out[4];
  cpuReduceFn(DType::kBool, RedOp::kLogicalXor)(a, b, out, 4);
  EXPECT_EQ(std::vector<bool>(out, out + 4), (std::vector<bool>{false, true, true, false}));
  const uint8_t x[] = {0xF0}, y[] = {0x3C};
  uint8_t z[1];
  cpuReduceFn(DType::kByte, RedOp::kBitXor)(x, y, z, 1);
  EXPECT_EQ(z[0], 0xCC);
}

TEST(Reducer, MinLocMaxLocPreferTheLowerIndexOnTies) {
  using P = ValueIndexPair<double>;
  const std::vector<P> a = {{1.0, 7}, {2.0, 3}, {5.0, 9}, {5.0, 1}};
  const std::vector<P> b = {{1.0, 2}, {1.0, 8}, {5.0, 4}, {6.0, 0}};
  const auto mins = reduce(DType::kDoubleInt, RedOp::kMinLoc, a, b);
  EXPECT_EQ(mins[0].index, 2);
  EXPECT_EQ(mins[1].index, 8);
  EXPECT_EQ(mins[2].index, 4);
  EXPECT_EQ(mins[3].index, 1);
  const auto maxs = reduce(DType::kDoubleInt, RedOp::kMaxLoc, a, b);
  EXPECT_EQ(maxs[0].index, 2);
  EXPECT_EQ(maxs[1].index, 3);
  EXPECT_EQ(maxs[2].index, 4);
  EXPECT_EQ(maxs[3].index, 0);
  EXPECT_EQ(maxs[3].value, 6.0);
}

// The AVX2 kernels against the portable ones, over every (type, op) MPI allows, boundary values
// (signed zeros, subnormals, extremes, infinities, NaN, ties of MINLOC/MAXLOC) and lengths that
// cover the vector bodies and every tail, in place and not. Equal means the same bits, except that
// a NaN only has to be a NaN (two NaN operands may give either payload, as MPI allows).
template <typename T>
std::vector<T> boundaryValues() {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_floating_point_v<T>) {
    return {T(0),
            -T(0),
            T(1),
            T(-1.5),
            L::min(),
            L::denorm_min(),
            -L::denorm_min(),
            L::max(),
            L::lowest(),
            L::infinity(),
            -L::infinity(),
            L::quiet_NaN(),
            T(1e-30),
            T(3.25),
            T(-7)};
  } else {
    return {T(0), T(1), static_cast<T>(-1), L::min(), L::max(), T(2), T(3), T(100)};
  }
}

template <typename T>
struct Values {
  static std::vector<T> draw(std::mt19937& rng, size_t n) {
    const std::vector<T> pool = boundaryValues<T>();
    std::vector<T> out(n);
    for (T& v : out) v = pool[rng() % pool.size()];
    return out;
  }
  static bool same(const T& a, const T& b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
      return a == b && std::signbit(a) == std::signbit(b);
    } else {
      return a == b;
    }
  }
};

template <typename T>
struct Values<std::complex<T>> {
  static std::vector<std::complex<T>> draw(std::mt19937& rng, size_t n) {
    const std::vector<T> re = Values<T>::draw(rng, n), im = Values<T>::draw(rng, n);
    std::vector<std::complex<T>> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = {re[i], im[i]};
    return out;
  }
  static bool same(const std::complex<T>& a, const std::complex<T>& b) {
    return Values<T>::same(a.real(), b.real()) && Values<T>::same(a.imag(), b.imag());
  }
};

template <typename V>
struct Values<ValueIndexPair<V>> {
  static std::vector<ValueIndexPair<V>> draw(std::mt19937& rng, size_t n) {
    const std::vector<V> values = Values<V>::draw(rng, n);
    std::vector<ValueIndexPair<V>> out(n);
    for (size_t i = 0; i < n; ++i) {
      std::memset(static_cast<void*>(&out[i]), 0, sizeof out[i]);  // padding compares too
      out[i].value = values[i];
      out[i].index = static_cast<int>(rng() % 4);  // ties
    }
    return out;
  }
  static bool same(const ValueIndexPair<V>& a, const ValueIndexPair<V>& b) {
    return Values<V>::same(a.value, b.value) && a.index == b.index;
  }
};

// MPI_C_BOOL's elements, held as bytes that are 0 or 1 (std::vector<bool> holds bits).
struct BoolByte {
  uint8_t bits;
};

template <>
struct Values<BoolByte> {
  static std::vector<BoolByte> draw(std::mt19937& rng, size_t n) {
    std::vector<BoolByte> out(n);
    for (BoolByte& v : out) v.bits = static_cast<uint8_t>(rng() % 2);
    return out;
  }
  static bool same(const BoolByte& a, const BoolByte& b) { return a.bits == b.bits; }
};

template <typename T>
void expectPathsAgree(DType type, RedOp op) {
  std::mt19937 rng(static_cast<unsigned>(type) * 131u + static_cast<unsigned>(op));
  for (size_t n : {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 1000, 4099}) {
    const std::vector<T> a = Values<T>::draw(rng, n), b = Values<T>::draw(rng, n);
    std::vector<T> portable(n), avx2(n), inPlace = b;
    cpuReduceFn(type, op, ReducePath::kPortable)(a.data(), b.data(), portable.data(), n);
    cpuReduceFn(type, op, ReducePath::kAvx2)(a.data(), b.data(), avx2.data(), n);
    cpuReduceFn(type, op, ReducePath::kAvx2)(a.data(), inPlace.data(), inPlace.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(Values<T>::same(portable[i], avx2[i]))
          << dtypeName(type) << " " << redOpName(op) << " n=" << n << " i=" << i;
      ASSERT_TRUE(Values<T>::same(portable[i], inPlace[i]))
          << dtypeName(type) << " " << redOpName(op) << " in place, n=" << n << " i=" << i;
    }
  }
}

void expectPathsAgreeOn(DType type, RedOp op) {
  switch (type) {
    case DType::kInt8:
      return expectPathsAgree<int8_t>(type, op);
    case DType::kInt16:
      return expectPathsAgree<int16_t>(type, op);
    case DType::kInt32:
      return expectPathsAgree<int32_t>(type, op);
    case DType::kInt64:
      return expectPathsAgree<int64_t>(type, op);
    case DType::kUInt8:
      return expectPathsAgree<uint8_t>(type, op);
    case DType::kUInt16:
      return expectPathsAgree<uint16_t>(type, op);
    case DType::kUInt32:
      return expectPathsAgree<uint32_t>(type, op);
    case DType::kUInt64:
      return expectPathsAgree<uint64_t>(type, op);
    case DType::kFloat32:
      return expectPathsAgree<float>(type, op);
    case DType::kFloat64:
      return expectPathsAgree<double>(type, op);
    case DType::kLongDouble:
      return expectPathsAgree<long double>(type, op);
    case DType::kComplexFloat32:
      return expectPathsAgree<std::complex<float>>(type, op);
    case DType::kComplexFloat64:
      return expectPathsAgree<std::complex<double>>(type, op);
    case DType::kComplexLongDouble:
      return expectPathsAgree<std::complex<long double>>(type, op);
    case DType::kBool:
      return expectPathsAgree<BoolByte>(type, op);
    case DType::kByte:
      return expectPathsAgree<uint8_t>(type, op);
    case DType::kFloatInt:
      return expectPathsAgree<ValueIndexPair<float>>(type, op);
    case DType::kDoubleInt:
      return expectPathsAgree<ValueIndexPair<double>>(type, op);
    case DType::kLongInt:
      return expectPathsAgree<ValueIndexPair<long>>(type, op);
    case DType::kIntInt:
      return expectPathsAgree<ValueIndexPair<int>>(type, op);
    case DType::kShortInt:
      return expectPathsAgree<ValueIndexPair<short>>(type, op);
    case DType::kLongDoubleInt:
      return expectPathsAgree<ValueIndexPair<long double>>(type, op);
    case DType::kCount:
      break;
  }
  FAIL() << "no C type for " << dtypeName(type);
}

TEST(Reducer, Avx2KernelsGiveThePortableKernelsBits) {
  if (std::string(reduceImplementation()) != "avx2") GTEST_SKIP() << "this CPU has no AVX2";
  int pairs = 0;
  for (int t = 0; t < static_cast<int>(DType::kCount); ++t) {
    for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) {
      const auto type = static_cast<DType>(t);
      const auto op = static_cast<RedOp>(o);
      if (!opAllowedOn(op, type)) continue;
      ASSERT_NE(cpuReduceFn(type, op, ReducePath::kAvx2),
                cpuReduceFn(type, op, ReducePath::kPortable))
          << dtypeName(type) << " " << redOpName(op) << ": the same kernel twice checks nothing";
      expectPathsAgreeOn(type, op);
      ++pairs;
    }
  }
  EXPECT_GT(pairs, 100);
}

TEST(Reducer, AutoTakesTheImplementationItNames) {
  const ReducePath named =
      std::string(reduceImplementation()) == "avx2" ? ReducePath::kAvx2 : ReducePath::kPortable;
  EXPECT_EQ(cpuReduceFn(DType::kFloat32, RedOp::kSum),
            cpuReduceFn(DType::kFloat32, RedOp::kSum, named));
}

TEST(Reducer, PairSizesMatchTheCStructsMpiDescribes) {
  EXPECT_EQ(dtypeBytes(DType::kFloatInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kDoubleInt), 16u);
  EXPECT_EQ(dtypeBytes(DType::kShortInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kIntInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kLongDoubleInt), sizeof(long double) * 2);
}

}  // namespace
}  // namespace gfshim
