// The lane of small calls (policy.h, SmallCallRule): the hook answers small calls before
// planCall runs, so every answer it gives must be planCall's own, for every setting that moves
// the bounds and every datatype, op, count and variant.
#include <gtest/gtest.h>

#include "engine/policy.h"

namespace gfshim {
namespace {

constexpr int kDTypes = static_cast<int>(DType::kCount);
constexpr int kOps = static_cast<int>(RedOp::kCount);

CallInfo callOf(DType dtype, RedOp op, int64_t count, bool nonblocking) {
  CallInfo call;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.nonblocking = nonblocking;
  call.sendAddress = 0x10000;
  call.recvAddress = 0x10000000;
  return call;
}

// Every combination of the settings the rule reads.
std::vector<Settings> settingsGrid() {
  std::vector<Settings> grid;
  for (int bits = 0; bits < 64; ++bits) {
    Settings s;
    s.enable = (bits & 1) != 0;
    s.fusion = (bits & 2) != 0;
    s.fusionAvailable = (bits & 4) != 0;
    s.nativeIallreduceBesideFusion = (bits & 8) != 0;
    s.reproducible = (bits & 16) != 0;
    s.minBytes = (bits & 32) != 0 ? 4096 : 1;
    s.fusionMinBytes = 65536;
    s.segmentBytes = 4096;
    grid.push_back(s);
  }
  return grid;
}

TEST(SmallCalls, EveryAnswerOfTheLaneIsPlanCallsAnswer) {
  const int64_t counts[] = {-1,   0,    1,    7,    8,    255,   256,   257,   1023,
                            1024, 4095, 4096, 8191, 8192, 16383, 16384, 65535, 65536};
  int answered = 0;
  for (const Settings& s : settingsGrid()) {
    const SmallCallRule rule = smallCallRule(s);
    for (int t = 0; t < kDTypes; ++t) {
      for (int o = 0; o < kOps; ++o) {
        for (const int64_t count : counts) {
          for (const bool nonblocking : {false, true}) {
            for (const bool nullComm : {false, true}) {
              CallInfo call =
                  callOf(static_cast<DType>(t), static_cast<RedOp>(o), count, nonblocking);
              call.nullComm = nullComm;
              const std::optional<Reason> lane = smallCallReason(rule, call);
              const Plan plan = planCall(call, s);
              const bool small =
                  plan.route == Route::kPassthrough &&
                  (plan.reason == Reason::kBelowMinBytes || plan.reason == Reason::kBelowFusionMin);
              ASSERT_EQ(lane.has_value(), small)
                  << "dtype " << t << " op " << o << " count " << count << " nonblocking "
                  << nonblocking << " null comm " << nullComm << " planCall says "
                  << reasonText(plan.reason);
              if (lane) {
                EXPECT_EQ(*lane, plan.reason);
                ++answered;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(answered, 1000);  // the grid reaches the lane, not only the calls it leaves alone
}

TEST(SmallCalls, TheCountLimitIsTheFirstCountAtTheBound) {
  Settings s;
  s.minBytes = 1000;  // not a multiple of 8: the limit rounds up
  const SmallCallRule rule = smallCallRule(s);
  const int64_t limit = smallCallCountLimit(rule, DType::kFloat64, RedOp::kSum, false);
  EXPECT_EQ(limit, 125);  // 125 x 8 = 1000 bytes is not below 1000
  EXPECT_TRUE(smallCallReason(rule, callOf(DType::kFloat64, RedOp::kSum, 124, false)));
  EXPECT_FALSE(smallCallReason(rule, callOf(DType::kFloat64, RedOp::kSum, 125, false)));
  s.minBytes = 1001;
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kFloat64, RedOp::kSum, false), 126);
}

TEST(SmallCalls, NoCallIsSmallWhereTheRuleHasNoBound) {
  Settings s;
  s.enable = false;
  s.minBytes = 1 << 20;
  const SmallCallRule off = smallCallRule(s);
  EXPECT_EQ(smallCallCountLimit(off, DType::kFloat32, RedOp::kSum, false), 0);
  EXPECT_EQ(smallCallCountLimit(off, DType::kFloat32, RedOp::kSum, true), 0);
  s.enable = true;
  s.nativeIallreduceBesideFusion = false;  // an MPI_Iallreduce may not go to the MPI's own
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kInt32, RedOp::kSum, true), 0);
  s.reproducible = true;  // floating point is the chain's at every size; integers stay small
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kFloat32, RedOp::kSum, false), 0);
  EXPECT_GT(smallCallCountLimit(smallCallRule(s), DType::kInt32, RedOp::kSum, false), 0);
  // MPI forbids a bitwise op on floats: that call is planCall's (kOpNotAllowed), never small.
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kInt32, RedOp::kBitAnd, false) > 0, true);
  EXPECT_EQ(smallCallCountLimit(smallCallRule(s), DType::kFloat64, RedOp::kBitAnd, false), 0);
}

}  // namespace
}  // namespace gfshim
