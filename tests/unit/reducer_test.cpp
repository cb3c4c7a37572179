#include "algo/reducer.h"

#include <gtest/gtest.h>

#include <complex>
#include <cstdint>
#include <cstring>
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

TEST(Reducer, PairSizesMatchTheCStructsMpiDescribes) {
  EXPECT_EQ(dtypeBytes(DType::kFloatInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kDoubleInt), 16u);
  EXPECT_EQ(dtypeBytes(DType::kShortInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kIntInt), 8u);
  EXPECT_EQ(dtypeBytes(DType::kLongDoubleInt), sizeof(long double) * 2);
}

}  // namespace
}  // namespace gfshim
