#include "engine/policy.h"

#include <gtest/gtest.h>

namespace gfshim {
namespace {

CallInfo floatSum(int64_t count) {
  CallInfo call;
  call.count = count;
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.sendAddress = 0x10000;
  call.recvAddress = 0x80000;
  return call;
}

Settings settings(uint64_t minBytes = 1024, AlgoChoice algo = AlgoChoice::kAuto) {
  Settings s;
  s.minBytes = minBytes;
  s.segmentBytes = 4096;
  s.algo = algo;
  return s;
}

CommFacts comm(int size) {
  CommFacts facts;
  facts.size = size;
  return facts;
}

Reason decide(const CallInfo& call, const Settings& s, const CommFacts& c) {
  return planOnComm(planCall(call, s), c).reason;
}

TEST(Policy, LargeFloatSumGoesToTheRing) {
  const Plan plan = planOnComm(planCall(floatSum(1024), settings()), comm(4));
  EXPECT_EQ(plan.route, Route::kEngine);
  EXPECT_EQ(plan.algo, Algo::kRing);
  EXPECT_EQ(plan.reason, Reason::kRingAuto);
  EXPECT_EQ(plan.segmentBytes, 4096u);
  EXPECT_EQ(decide(floatSum(1024), settings(1024, AlgoChoice::kRing), comm(4)),
            Reason::kRingForced);
}

TEST(Policy, PassthroughTable) {
  struct Case {
    const char* name;
    CallInfo call;
    Settings settings;
    CommFacts comm;
    Reason expected;
  };
  auto with = [](CallInfo call, auto change) {
    change(call);
    return call;
  };
  Settings disabled = settings();
  disabled.enable = false;
  CommFacts inter = comm(4);
  inter.interComm = true;
  CommFacts spanning = comm(4);
  spanning.spansWorlds = true;
  CommFacts disagreeing = comm(4);
  disagreeing.paramsAgree = false;
  const Case cases[] = {
      {"disabled", floatSum(1024), disabled, comm(4), Reason::kDisabled},
      {"nonblocking", with(floatSum(1024), [](CallInfo& c) { c.nonblocking = true; }), settings(),
       comm(4), Reason::kNonblocking},
      {"negative count", floatSum(-1), settings(0), comm(4), Reason::kInvalidCount},
      {"empty", floatSum(0), settings(0), comm(4), Reason::kEmpty},
      {"derived type", with(floatSum(1024), [](CallInfo& c) { c.dtype.reset(); }), settings(),
       comm(4), Reason::kUnsupportedDatatype},
      {"user op", with(floatSum(1024), [](CallInfo& c) { c.op.reset(); }), settings(), comm(4),
       Reason::kUserOp},
      {"band on float", with(floatSum(1024), [](CallInfo& c) { c.op = RedOp::kBitAnd; }),
       settings(), comm(4), Reason::kOpNotAllowed},
      {"minloc on int",
       with(floatSum(1024),
            [](CallInfo& c) {
              c.dtype = DType::kInt32;
              c.op = RedOp::kMinLoc;
            }),
       settings(), comm(4), Reason::kOpNotAllowed},
      {"small", floatSum(255), settings(1024), comm(4), Reason::kBelowMinBytes},
      {"null buffer", with(floatSum(1024), [](CallInfo& c) { c.recvAddress = 0; }), settings(),
       comm(4), Reason::kNullBuffer},
      {"null send buffer", with(floatSum(1024), [](CallInfo& c) { c.sendAddress = 0; }), settings(),
       comm(4), Reason::kNullBuffer},
      {"aliased", with(floatSum(1024), [](CallInfo& c) { c.sendAddress = c.recvAddress; }),
       settings(), comm(4), Reason::kOverlappingBuffers},
      {"overlap",
       with(floatSum(1024), [](CallInfo& c) { c.sendAddress = c.recvAddress - 4 * 1023; }),
       settings(), comm(4), Reason::kOverlappingBuffers},
      {"native", floatSum(1024), settings(1024, AlgoChoice::kNative), comm(4), Reason::kAlgoNative},
      {"intercomm", floatSum(1024), settings(), inter, Reason::kInterComm},
      {"spans worlds", floatSum(1024), settings(), spanning, Reason::kSpansWorlds},
      {"params disagree", floatSum(1024), settings(), disagreeing, Reason::kParamsDisagree},
      {"one rank", floatSum(1024), settings(), comm(1), Reason::kSingleRank},
  };
  for (const Case& c : cases) {
    const Plan plan = planOnComm(planCall(c.call, c.settings), c.comm);
    EXPECT_EQ(plan.route, Route::kPassthrough) << c.name;
    EXPECT_EQ(plan.reason, c.expected) << c.name << ": got " << reasonText(plan.reason);
    EXPECT_FALSE(isEngineReason(plan.reason)) << c.name;
  }
}

TEST(Policy, ThresholdIsInclusiveAndCountsBytes) {
  EXPECT_EQ(decide(floatSum(256), settings(1024), comm(2)), Reason::kRingAuto);
  EXPECT_EQ(decide(floatSum(255), settings(1024), comm(2)), Reason::kBelowMinBytes);
  CallInfo doubles = floatSum(128);
  doubles.dtype = DType::kFloat64;
  EXPECT_EQ(decide(doubles, settings(1024), comm(2)), Reason::kRingAuto);
}

// Invariant 2: the decision depends only on what must match across ranks. Rank-local facts
// of a correct program (buffer addresses, MPI_IN_PLACE, the rank) never change the plan.
TEST(Policy, RankLocalFactsOfCorrectCallsDoNotChangeThePlan) {
  const Reason reference = decide(floatSum(1024), settings(), comm(4));
  EXPECT_EQ(reference, Reason::kRingAuto);
  CallInfo inPlace = floatSum(1024);
  inPlace.inPlace = true;
  inPlace.sendAddress = 1;  // MPI_IN_PLACE's value does not matter
  EXPECT_EQ(decide(inPlace, settings(), comm(4)), reference);
  CallInfo elsewhere = floatSum(1024);
  elsewhere.sendAddress = 0x7f0000000000;
  elsewhere.recvAddress = 0x100000;
  EXPECT_EQ(decide(elsewhere, settings(), comm(4)), reference);
  CallInfo adjacent = floatSum(1024);
  adjacent.sendAddress = adjacent.recvAddress + 4 * 1024;  // touching, not overlapping
  EXPECT_EQ(decide(adjacent, settings(), comm(4)), reference);
  CommFacts rank3 = comm(4);
  rank3.rank = 3;
  EXPECT_EQ(decide(floatSum(1024), settings(), rank3), reference);
}

TEST(Policy, EveryReasonHasText) {
  for (int i = 0; i < kReasonCount; ++i) {
    EXPECT_STRNE(reasonText(static_cast<Reason>(i)), "?") << i;
  }
}

}  // namespace
}  // namespace gfshim
