// The shared drivers of the lossy modes, runCscSteps (compress/csc_steps.h) and runHalfWireSteps
// (compress/half_wire_steps.h), over scripted backends that log every primitive they are asked
// for: the order of the steps, the sizes handed to them, every decision (sparse, dense, declined,
// redo) and what a failure at each step leaves behind. The host backend's results are tested in
// csc_test.cpp and the fake-transport tests; the plugin's against the host's in tests/gpu_emul.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compress/csc_steps.h"
#include "compress/half_wire_steps.h"

namespace gfshim {
namespace {

using Log = std::vector<std::string>;

Status failure(const std::string& step) {
  return Status::error(StatusCode::kTransportError, "failed at " + step);
}

// Logs each step; `failAt` names the step that fails (with `failCode`); `peer` is the largest
// readiness of the other ranks.
class ScriptedCsc : public CscBackend {
 public:
  Status reserveDense(size_t count) override {
    return step("reserveDense " + std::to_string(count), "reserveDense");
  }
  Status findResidual(size_t count, int64_t** callsSeen) override {
    *callsSeen = hasEntry ? &callsSeenValue : nullptr;
    return step("findResidual " + std::to_string(count), "findResidual");
  }
  Status reserveSparse(const CscShape& shape) override {
    lastShape = shape;
    return step("reserveSparse " + std::to_string(shape.chunks) + " " +
                    std::to_string(shape.selected) + " " + std::to_string(shape.maxPacked),
                "reserveSparse");
  }
  Status agree(CscReadiness mine, CscReadiness* agreed) override {
    *agreed = std::max(mine, peer);
    return step("agree " + std::to_string(static_cast<int>(mine)), "agree");
  }
  Status allreduceDense(size_t count) override {
    return step("allreduceDense " + std::to_string(count), "allreduceDense");
  }
  Status allreduceDenseCorrected(const CscShape& shape) override {
    return step("allreduceDenseCorrected " + std::to_string(shape.count) + " m" +
                    std::to_string(shape.momentum),
                "allreduceDenseCorrected");
  }
  Status addAndNorms(const CscShape& shape) override {
    return step(shape.momentum > 0 ? "addAndNorms m" + std::to_string(shape.momentum)
                                   : "addAndNorms",
                "addAndNorms");
  }
  Status allreduceNorms(const CscShape&) override {
    return step("allreduceNorms", "allreduceNorms");
  }
  Status selectTop(const CscShape&) override { return step("selectTop", "selectTop"); }
  Status pack(const CscShape& shape, size_t* packedCount) override {
    *packedCount = shape.maxPacked - packShortBy;
    return step("pack", "pack");
  }
  Status allreducePacked(size_t packedCount) override {
    return step("allreducePacked " + std::to_string(packedCount), "allreducePacked");
  }
  Status unpackAndClear(const CscShape&) override {
    return step("unpackAndClear", "unpackAndClear");
  }
  Status momentumToGradient(const CscShape&) override {
    return step("momentumToGradient", "momentumToGradient");
  }
  Status finish(bool sparse) override {
    return step(sparse ? "finish sparse" : "finish dense", "finish");
  }
  void resetResidual() override { log.push_back("resetResidual"); }

  Log log;
  bool hasEntry = true;
  int64_t callsSeenValue = 0;
  CscReadiness peer = CscReadiness::kSparse;
  std::string failAt;
  StatusCode failCode = StatusCode::kTransportError;
  size_t packShortBy = 0;
  CscShape lastShape;

 private:
  Status step(const std::string& entry, const std::string& name) {
    log.push_back(entry);
    if (name != failAt) return Status::ok();
    return Status::error(failCode, "failed at " + name);
  }
};

const Log kSparseSteps = {"addAndNorms", "allreduceNorms", "selectTop", "pack"};

Log concat(std::initializer_list<Log> parts) {
  Log all;
  for (const Log& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

TEST(CscSteps, SparseCallRunsEveryStepInOrderAndCountsTheCall) {
  ScriptedCsc backend;
  backend.callsSeenValue = 2;
  backend.packShortBy = 24;  // the host packs the exact length, shorter than whole chunks
  CscOutcome outcome;
  // 1000 elements in chunks of 64: 16 chunks, the last of 40; 4 selected, 256 packed at most.
  ASSERT_TRUE(runCscSteps(CscParams{0.2, 64, 2}, 1000, backend, &outcome).isOk());
  EXPECT_EQ(backend.log,
            concat({{"reserveDense 1000", "findResidual 1000", "reserveSparse 16 4 256", "agree 0"},
                    kSparseSteps,
                    {"allreducePacked 232", "unpackAndClear", "finish sparse"}}));
  EXPECT_EQ(backend.callsSeenValue, 3);
  EXPECT_EQ(outcome.mode, CscMode::kSparse);
  EXPECT_EQ(outcome.chunks, 16u);
  EXPECT_EQ(outcome.selectedChunks, 4u);
  EXPECT_EQ(outcome.normsSent, 16u);
  EXPECT_EQ(outcome.elementsSent, 232u);
  EXPECT_EQ(backend.lastShape.count, 1000u);
  EXPECT_EQ(backend.lastShape.chunkElements, 64u);
}

TEST(CscSteps, MaxPackedStopsAtTheShortLastChunk) {
  ScriptedCsc backend;
  ASSERT_TRUE(runCscSteps(CscParams{1.0, 64, 0}, 100, backend, nullptr).isOk());
  EXPECT_EQ(backend.lastShape.chunks, 2u);
  EXPECT_EQ(backend.lastShape.selected, 2u);
  EXPECT_EQ(backend.lastShape.maxPacked, 100u);
}

struct DenseCase {
  const char* name;
  bool hasEntry;
  int64_t callsSeen;
  std::string failAt;  // a local step out of memory
  CscReadiness peer;
  CscMode mode;
  CscReadiness mine;
  bool reservesSparse;
};

TEST(CscSteps, EveryReasonToRunDenseAgreesDenseAndSendsTheWholeBuffer) {
  const DenseCase cases[] = {
      {"no entry", false, 0, "", CscReadiness::kSparse, CscMode::kDenseNoEntry,
       CscReadiness::kDense, false},
      {"warm-up", true, 1, "", CscReadiness::kSparse, CscMode::kDenseWarmup, CscReadiness::kDense,
       false},
      {"no sparse scratch", true, 5, "reserveSparse", CscReadiness::kSparse,
       CscMode::kDenseNoScratch, CscReadiness::kDense, true},
      {"a peer", true, 5, "", CscReadiness::kDense, CscMode::kDenseByPeer, CscReadiness::kSparse,
       true},
  };
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(c.name);
    ScriptedCsc backend;
    backend.hasEntry = c.hasEntry;
    backend.callsSeenValue = c.callsSeen;
    backend.failAt = c.failAt;
    backend.failCode = StatusCode::kOutOfMemory;
    backend.peer = c.peer;
    CscOutcome outcome;
    ASSERT_TRUE(runCscSteps(CscParams{0.5, 10, 2}, 100, backend, &outcome).isOk());
    Log expected = {"reserveDense 100", "findResidual 100"};
    if (c.reservesSparse) expected.push_back("reserveSparse 10 5 50");
    expected.push_back("agree " + std::to_string(static_cast<int>(c.mine)));
    expected.push_back("allreduceDense 100");
    expected.push_back("finish dense");
    EXPECT_EQ(backend.log, expected);
    EXPECT_EQ(outcome.mode, c.mode);
    EXPECT_EQ(outcome.elementsSent, 100u);
    EXPECT_EQ(outcome.chunks, 0u);
    EXPECT_EQ(backend.callsSeenValue, c.hasEntry ? c.callsSeen + 1 : 0);
  }
}

TEST(CscSteps, NoMemoryForTheDenseFormDeclinesTheCallOnEveryRank) {
  for (bool mine : {true, false}) {
    SCOPED_TRACE(mine ? "this rank has no memory" : "another rank has none");
    ScriptedCsc backend;
    backend.callsSeenValue = 7;
    if (mine) {
      backend.failAt = "reserveDense";
      backend.failCode = StatusCode::kOutOfMemory;
    } else {
      backend.peer = CscReadiness::kCannotRun;
    }
    CscOutcome outcome;
    const Status status = runCscSteps(CscParams{0.5, 10, 0}, 100, backend, &outcome);
    EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
    EXPECT_EQ(status.message(), mine ? "failed at reserveDense"
                                     : "another rank has no device memory for this CSC call");
    EXPECT_EQ(outcome.mode, CscMode::kDeclined);
    EXPECT_EQ(backend.log.back(), mine ? "agree 2" : "agree 0");  // nothing after the agreement
    EXPECT_EQ(backend.callsSeenValue, 7);
  }
}

// A call past its warm-up (3 calls seen) whose `step` fails with a transport error.
Status runFailingAt(const char* step, ScriptedCsc* backend) {
  backend->callsSeenValue = 3;
  backend->failAt = step;
  return runCscSteps(CscParams{0.5, 10, 0}, 100, *backend, nullptr);
}

TEST(CscSteps, OtherLocalErrorsEndTheCallBeforeTheAgreement) {
  for (const char* step : {"reserveDense", "findResidual", "reserveSparse", "agree"}) {
    SCOPED_TRACE(step);
    ScriptedCsc backend;
    EXPECT_EQ(runFailingAt(step, &backend).code(), StatusCode::kTransportError);
    EXPECT_EQ(backend.log.back().rfind(step, 0), 0u) << backend.log.back();
    EXPECT_EQ(backend.callsSeenValue, 3);  // the entry untouched
  }
}

TEST(CscSteps, AFailureAfterTheAgreementResetsTheEntry) {
  for (const char* step : {"addAndNorms", "allreduceNorms", "selectTop", "pack", "allreducePacked",
                           "unpackAndClear", "finish"}) {
    SCOPED_TRACE(step);
    ScriptedCsc backend;
    EXPECT_EQ(runFailingAt(step, &backend).code(), StatusCode::kTransportError);
    ASSERT_GE(backend.log.size(), 2u);
    EXPECT_EQ(backend.log[backend.log.size() - 2].rfind(step, 0), 0u);
    EXPECT_EQ(backend.log.back(), "resetResidual");
    EXPECT_EQ(backend.callsSeenValue, 0);
  }
  ScriptedCsc dense;
  dense.peer = CscReadiness::kDense;
  EXPECT_FALSE(runFailingAt("allreduceDense", &dense).isOk());
  EXPECT_EQ(dense.log.back(), "resetResidual");
  EXPECT_EQ(dense.callsSeenValue, 0);
}

CscParams withMomentum(int64_t warmupCalls, CscMomentumOutput output) {
  CscParams params{0.5, 10, warmupCalls};
  params.momentum = 0.5f;
  params.momentumOutput = output;
  return params;
}

TEST(CscSteps, MomentumCorrectionRunsInTheSparseStepsAndHandsBackWhatTheOutputSays) {
  for (CscMomentumOutput output : {CscMomentumOutput::kGradient, CscMomentumOutput::kUpdate}) {
    const bool gradient = output == CscMomentumOutput::kGradient;
    SCOPED_TRACE(gradient ? "gradient" : "update");
    ScriptedCsc backend;
    CscOutcome outcome;
    ASSERT_TRUE(runCscSteps(withMomentum(0, output), 100, backend, &outcome).isOk());
    Log expected = {"reserveDense 100",   "findResidual 100", "reserveSparse 10 5 50",
                    "agree 0",            "addAndNorms m0.500000", "allreduceNorms",
                    "selectTop",          "pack",             "allreducePacked 50",
                    "unpackAndClear"};
    if (gradient) expected.push_back("momentumToGradient");
    expected.push_back("finish sparse");
    EXPECT_EQ(backend.log, expected);
    EXPECT_TRUE(outcome.momentumCorrected);
  }
}

TEST(CscSteps, ADenseCallWithMomentumStateSendsTheAccumulationOneWithoutSendsTheInput) {
  for (bool hasEntry : {true, false}) {
    SCOPED_TRACE(hasEntry ? "warm-up, with an entry" : "no entry");
    ScriptedCsc backend;
    backend.hasEntry = hasEntry;
    CscOutcome outcome;
    ASSERT_TRUE(
        runCscSteps(withMomentum(3, CscMomentumOutput::kGradient), 100, backend, &outcome).isOk());
    const Log expected =
        hasEntry ? Log{"reserveDense 100", "findResidual 100", "agree 1",
                       "allreduceDenseCorrected 100 m0.500000", "momentumToGradient",
                       "finish dense"}
                 : Log{"reserveDense 100", "findResidual 100", "agree 1", "allreduceDense 100",
                       "finish dense"};
    EXPECT_EQ(backend.log, expected);
    EXPECT_EQ(outcome.momentumCorrected, hasEntry);
  }
}

TEST(CscSteps, AFailedMomentumStepResetsTheEntry) {
  for (const char* step : {"allreduceDenseCorrected", "momentumToGradient"}) {
    SCOPED_TRACE(step);
    ScriptedCsc backend;
    backend.callsSeenValue = 1;
    backend.failAt = step;
    EXPECT_FALSE(runCscSteps(withMomentum(5, CscMomentumOutput::kGradient), 100, backend, nullptr)
                     .isOk());
    EXPECT_EQ(backend.log.back(), "resetResidual");
    EXPECT_EQ(backend.callsSeenValue, 0);
  }
}

TEST(CscSteps, BadParametersCallNothing) {
  CscParams momentumOne{0.5, 4, 0};
  momentumOne.momentum = 1.0f;
  CscParams momentumNegative{0.5, 4, 0};
  momentumNegative.momentum = -0.1f;
  for (const CscParams& params : {CscParams{0.5, 0, 0}, CscParams{0.0, 4, 0}, CscParams{1.5, 4, 0},
                                  momentumOne, momentumNegative}) {
    ScriptedCsc backend;
    EXPECT_EQ(runCscSteps(params, 100, backend, nullptr).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(backend.log.empty());
  }
}

TEST(CscSteps, AnEmptySparseCallOnlyAgreesAndCounts) {
  ScriptedCsc backend;
  CscOutcome outcome;
  ASSERT_TRUE(runCscSteps(CscParams{0.5, 10, 0}, 0, backend, &outcome).isOk());
  EXPECT_EQ(backend.log, (Log{"reserveDense 0", "findResidual 0", "agree 0", "finish sparse"}));
  EXPECT_EQ(outcome.mode, CscMode::kSparse);
  EXPECT_EQ(backend.callsSeenValue, 1);
}

// Logs each primitive with its pointers named; anyNonFinite answers `overflow`.
class ScriptedHalfWire : public HalfWireBackend {
 public:
  ScriptedHalfWire(const float* in, float* out) : in_(in), out_(out) {}
  Status exactSum(const float* in, float* out, size_t count) override {
    log.push_back("exact " + name(in) + "->" + name(out) + " " + std::to_string(count));
    return failAt == "exact" ? failure("exact") : Status::ok();
  }
  Status keepInput(const float* in, size_t count, const float** kept) override {
    log.push_back("keep " + name(in) + " " + std::to_string(count));
    *kept = &kept_;
    return failAt == "keep" ? Status::error(StatusCode::kOutOfMemory, "keep") : Status::ok();
  }
  Status compressedSum(HalfFormat format, float encodeScale, float decodeScale, const float* in,
                       float* out, size_t count) override {
    log.push_back(std::string(halfFormatName(format)) + " " + name(in) + "->" + name(out) + " " +
                  std::to_string(count) + " x" + std::to_string(encodeScale) + " x" +
                  std::to_string(decodeScale));
    return Status::ok();
  }
  Status anyNonFinite(const float* values, size_t, bool* found) override {
    log.push_back("check " + name(values));
    *found = overflow;
    return Status::ok();
  }

  Log log;
  bool overflow = false;
  std::string failAt;

 private:
  std::string name(const float* p) const {
    return p == &kept_ ? "kept" : p == in_ && p == out_ ? "inout" : p == in_ ? "in" : "out";
  }
  const float* in_;
  float* out_;
  float kept_ = 0;
};

TEST(HalfWireSteps, ExactIsOneExactSum) {
  float in = 1, out = 0;
  ScriptedHalfWire backend(&in, &out);
  bool redone = false;
  ASSERT_TRUE(runHalfWireSteps(HalfWireCall{}, &in, &out, 5, backend, &redone).isOk());
  EXPECT_EQ(backend.log, (Log{"exact in->out 5"}));
  EXPECT_FALSE(redone);
}

TEST(HalfWireSteps, CompressedThenCheckedWithTheScalesOfPrescale) {
  float in = 1, out = 0;
  for (bool prescale : {false, true}) {
    ScriptedHalfWire backend(&in, &out);
    bool redone = false;
    const HalfWireCall call{true, HalfFormat::kBf16, prescale, 4};
    ASSERT_TRUE(runHalfWireSteps(call, &in, &out, 5, backend, &redone).isOk());
    EXPECT_EQ(backend.log, (Log{prescale ? "bf16 in->out 5 x0.250000 x4.000000"
                                         : "bf16 in->out 5 x1.000000 x1.000000",
                                "check out"}));
    EXPECT_FALSE(redone);
  }
}

TEST(HalfWireSteps, InPlaceKeepsTheInputAndAnOverflowRedoesFromIt) {
  float buffer = 1;
  ScriptedHalfWire backend(&buffer, &buffer);
  backend.overflow = true;
  bool redone = false;
  const HalfWireCall call{true, HalfFormat::kFp16, false, 2};
  ASSERT_TRUE(runHalfWireSteps(call, &buffer, &buffer, 5, backend, &redone).isOk());
  EXPECT_EQ(backend.log, (Log{"keep inout 5", "fp16 kept->inout 5 x1.000000 x1.000000",
                              "check inout", "exact kept->inout 5"}));
  EXPECT_TRUE(redone);
}

TEST(HalfWireSteps, NothingForAnEmptyCallOrWithoutTheInputCopy) {
  float buffer = 1;
  const HalfWireCall call{true, HalfFormat::kFp16, false, 2};
  ScriptedHalfWire empty(&buffer, &buffer);
  bool redone = false;
  ASSERT_TRUE(runHalfWireSteps(call, &buffer, &buffer, 0, empty, &redone).isOk());
  EXPECT_TRUE(empty.log.empty());
  ScriptedHalfWire noCopy(&buffer, &buffer);
  noCopy.failAt = "keep";
  EXPECT_EQ(runHalfWireSteps(call, &buffer, &buffer, 5, noCopy, &redone).code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(noCopy.log, (Log{"keep inout 5"}));
  EXPECT_FALSE(redone);
}

}  // namespace
}  // namespace gfshim
