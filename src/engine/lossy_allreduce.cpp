#include "engine/lossy_allreduce.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "algo/compressed_ring.h"
#include "algo/ring_schedule.h"
#include "algo/torus_allreduce.h"
#include "common/log.h"
#include "compress/half_wire_steps.h"
#include "engine/corrected_buffers.h"
#include "engine/execute.h"

namespace gfshim {
namespace {

CallInfo floatSum(size_t count, bool inPlace) {
  CallInfo call;
  call.count = static_cast<int64_t>(count);
  call.dtype = DType::kFloat32;
  call.op = RedOp::kSum;
  call.inPlace = inPlace;
  return call;
}

Plan exactPlan(const Plan& plan) {
  Plan exact = plan;
  exact.lossy = LossyModes{};
  return exact;
}

Status exactAllreduce(const Plan& plan, size_t count, const float* send, float* recv,
                      const LossyTarget& target) {
  return executePlan(exactPlan(plan), floatSum(count, send == recv), target.transport,
                     target.workspace, send, recv, target.grid);
}

// No element is Inf or NaN (all exponent bits set). Branch-free, so it vectorizes.
bool allFinite(const float* values, size_t count) {
  uint32_t nonFinite = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    nonFinite |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return nonFinite == 0;
}

// runHalfWireSteps' primitives on the engine: the plain ring or torus, the compressed ring or
// torus (algo/compressed_ring.h), host memory.
class EngineHalfWire final : public HalfWireBackend {
 public:
  EngineHalfWire(const Plan& plan, const LossyTarget& target, LossyState& state)
      : plan_(plan), target_(target), state_(state) {}
  Status exactSum(const float* in, float* out, size_t count) override {
    return exactAllreduce(plan_, count, in, out, target_);
  }
  Status keepInput(const float* in, size_t count, const float** kept) override {
    auto* copy = reinterpret_cast<float*>(state_.inputCopy.reserve(count * sizeof(float)));
    if (copy == nullptr) {
      return Status::error(StatusCode::kOutOfMemory, "cannot copy the input of a lossy call");
    }
    std::memcpy(copy, in, count * sizeof(float));
    *kept = copy;
    return Status::ok();
  }
  // The compressed ring and torus scale on encoding only; the decoded sum is scaled here.
  Status compressedSum(HalfFormat format, float encodeScale, float decodeScale, const float* in,
                       float* out, size_t count) override {
    Transport& transport = target_.transport;
    if (plan_.algo == Algo::kTorus2d && target_.grid != nullptr) {
      GFSHIM_RETURN_IF_ERROR(runCompressedTorusAllreduce(*target_.grid, count, plan_.segmentBytes,
                                                         plan_.torusPieces, format, encodeScale,
                                                         transport, target_.workspace, in, out));
    } else {
      const RingSchedule schedule(transport.size(), transport.rank(), count, sizeof(float),
                                  plan_.segmentBytes);
      GFSHIM_RETURN_IF_ERROR(runCompressedRing(schedule, RingPart::kAllreduce, format, encodeScale,
                                               transport, target_.workspace, in, out));
    }
    if (decodeScale != 1.0f) {
      for (size_t i = 0; i < count; ++i) out[i] *= decodeScale;
    }
    return Status::ok();
  }
  Status anyNonFinite(const float* values, size_t count, bool* found) override {
    *found = !allFinite(values, count);
    return Status::ok();
  }

 private:
  const Plan& plan_;
  const LossyTarget& target_;
  LossyState& state_;
};

// The dense step: exact, or 16-bit on the wire with the overflow redo.
Status denseLossy(const Plan& plan, const Settings& settings, size_t count, const float* in,
                  float* out, const LossyTarget& target, LossyState& state, bool* redone) {
  HalfWireCall call;
  call.halfWire = plan.lossy.codec != WireCodec::kNone;
  call.format = plan.lossy.codec == WireCodec::kBf16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
  call.prescale = settings.prescale;
  call.ranks = target.transport.size();
  EngineHalfWire backend(plan, target, state);
  return runHalfWireSteps(call, in, out, count, backend, redone);
}

// CSC's collectives on the engine.
class EngineCscDense : public CscDense {
 public:
  EngineCscDense(const Plan& plan, const Settings& settings, const LossyTarget& target,
                 LossyState& state)
      : plan_(plan), settings_(settings), target_(target), state_(state) {}
  Status agreeDense(bool wantDense, bool* anyDense) override {
    return target_.agreeAny(wantDense, anyDense);
  }
  Status allreduceNorms(float* norms, size_t chunks) override {
    return exactAllreduce(plan_, chunks, norms, norms, target_);
  }
  Status allreduceValues(const float* packed, float* summed, size_t n) override {
    return denseLossy(plan_, settings_, n, packed, summed, target_, state_, &redone);
  }
  bool redone = false;

 private:
  const Plan& plan_;
  const Settings& settings_;
  const LossyTarget& target_;
  LossyState& state_;
};

// The arrays an entry keeps beside its residual (compress/csc.h, CscResidual).
template <typename Visit>
void forEachArray(CscResidual& a, CscResidual& b, Visit visit) {
  visit(a.values, b.values);
  visit(a.velocity, b.velocity);
  visit(a.delivered, b.delivered);
}

// Records that this engine keeps the key's velocity; warns (once in the process) when another
// engine keeps one for the same buffer.
void claimVelocity(const ResidualKey& key, LossyState& state) {
  static std::atomic<bool> warned{false};
  if (!CorrectedBuffers::process().claim(key.address, key.count, &state)) return;
  if (warned.exchange(true)) return;
  GFSHIM_WARN(kEngine,
              "GFSHIM_CSC_MOMENTUM: a buffer of %zu floats is momentum-corrected on two paths (its "
              "blocking calls and its MPI_Iallreduces, or two communicators), each with its own "
              "velocity: what comes back for it is not momentum SGD's update. Reduce each gradient "
              "one way on one communicator (said once)",
              key.count);
}

// The residual of the call: the key's own entry, or the operations' entries gathered into the
// state's bucket residual (nullptr when any of them is refused by the memory cap, or has no name
// yet: an operation whose place in the step is not known, engine/step_positions.h).
CscResidual* residualFor(const std::vector<ResidualKey>& keys, size_t count, LossyState& state,
                         std::vector<CscResidual*>* parts) {
  parts->clear();
  for (const ResidualKey& key : keys) {
    if (key.address == 0) return nullptr;
    CscResidual* entry = state.residuals.findOrCreate(0, key.address, key.count);
    if (entry == nullptr) {
      if (!state.capWarned) {
        GFSHIM_WARN(kEngine,
                    "GFSHIM_CSC_MAX_RESIDUAL_BYTES (%zu bytes) reached: further buffers on this "
                    "communicator run dense",
                    state.residuals.capBytes());
        state.capWarned = true;
      }
      return nullptr;
    }
    if (state.claimsVelocities) claimVelocity(key, state);
    parts->push_back(entry);
  }
  if (parts->size() == 1) return parts->front();
  CscResidual& bucket = state.bucketResidual;
  bool allocated = true;
  forEachArray(bucket, *parts->front(), [&](std::unique_ptr<float[]>& whole,
                                            const std::unique_ptr<float[]>& part) {
    if (!part) {
      whole.reset();
    } else if (bucket.count < count || !whole) {
      whole.reset(new (std::nothrow) float[count]);
      allocated = allocated && whole != nullptr;
    }
  });
  if (!allocated) {
    bucket = CscResidual{};
    return nullptr;
  }
  bucket.count = count;
  bucket.callsSeen = INT64_MAX;
  size_t offset = 0;
  for (CscResidual* part : *parts) {
    forEachArray(bucket, *part, [&](std::unique_ptr<float[]>& whole,
                                    const std::unique_ptr<float[]>& values) {
      if (whole) std::memcpy(whole.get() + offset, values.get(), part->count * sizeof(float));
    });
    offset += part->count;
    bucket.callsSeen = std::min(bucket.callsSeen, part->callsSeen);
  }
  return &bucket;
}

void scatterResidual(CscResidual& bucket, int64_t callsBefore,
                     const std::vector<CscResidual*>& parts) {
  const bool counted = bucket.callsSeen > callsBefore;
  size_t offset = 0;
  for (CscResidual* part : parts) {
    forEachArray(bucket, *part, [&](std::unique_ptr<float[]>& whole,
                                    std::unique_ptr<float[]>& values) {
      if (whole) std::memcpy(values.get(), whole.get() + offset, part->count * sizeof(float));
    });
    offset += part->count;
    if (counted) ++part->callsSeen;
  }
}

uint64_t mixStamp(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
  return hash;
}

// The gradient output's agreement (see lossy_allreduce.h): every rank's entries last delivered in
// the same call, or every rank forgets what they delivered. Collective on every call with that
// output, so a rank without an entry for the call (residual null: the cap, or no memory) takes
// part too, with a stamp no entry has: every rank then hands back the whole update, which is the
// dense sum that rank gets.
Status agreeOnDelivered(const std::vector<CscResidual*>& parts, CscResidual* residual,
                        const LossyTarget& target, LossyState& state) {
  constexpr uint64_t kNoEntry = ~uint64_t{0};
  uint64_t stamps = kNoEntry;
  if (residual != nullptr) {
    stamps = 0;
    for (const CscResidual* part : parts) stamps = mixStamp(stamps, part->deliveredStamp);
  }
  bool equal = false;
  GFSHIM_RETURN_IF_ERROR(target.agreeEqual(stamps, &equal));
  if (equal || residual == nullptr) return Status::ok();
  std::fill(residual->delivered.get(), residual->delivered.get() + residual->count, 0.0f);
  if (!state.deliveredWarned) {
    GFSHIM_WARN(kEngine,
                "GFSHIM_CSC_MOMENTUM_OUTPUT=gradient: the ranks reduced different buffers (or a new "
                "one) for the same gradient; every rank hands back this call's update whole, without "
                "subtracting the last one (said once)");
    state.deliveredWarned = true;
  }
  return Status::ok();
}

void stampDelivered(const std::vector<CscResidual*>& parts, uint64_t call, bool ok) {
  for (size_t k = 0; k < parts.size(); ++k) {
    parts[k]->deliveredStamp = ok ? mixStamp(mixStamp(0, call), k + 1) : 0;
  }
}

// The input of a sparse call with GFSHIM_CSC_CLIP: each key's part scaled to its limit, in the
// state's scratch; `send` itself when no part needs scaling, or (one WARN) when there is no memory
// for the scratch: the peers are about to run the call's collectives, so this rank runs it
// unclipped rather than fail alone.
const float* clippedInput(const Settings& settings, int ranks, const float* send, size_t count,
                          const std::vector<ResidualKey>& keys, LossyState& state) {
  if (!(settings.cscClip > 0)) return send;
  const double limit = settings.cscClip / std::sqrt(static_cast<double>(ranks));
  std::vector<float> scales;
  scales.reserve(keys.size());
  bool any = false;
  size_t offset = 0;
  for (const ResidualKey& key : keys) {
    scales.push_back(clipScale(send + offset, key.count, limit));
    any = any || scales.back() != 1.0f;
    offset += key.count;
  }
  if (!any) return send;
  auto* clipped = reinterpret_cast<float*>(state.clipped.reserve(count * sizeof(float)));
  if (clipped == nullptr) {
    if (!state.clipWarned) {
      GFSHIM_WARN(kEngine, "no memory to clip a %zu-element input (GFSHIM_CSC_CLIP): sent unclipped",
                  count);
      state.clipWarned = true;
    }
    return send;
  }
  offset = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    for (size_t i = offset; i < offset + keys[k].count; ++i) clipped[i] = scales[k] * send[i];
    offset += keys[k].count;
  }
  return clipped;
}

}  // namespace

LossyState::LossyState(const Settings& settings)
    : residuals(settings.cscMaxResidualBytes, cscArraysPerElement(cscParamsOf(settings))),
      claimsVelocities(velocitiesFollowBuffers(settings)) {}

LossyState::~LossyState() {
  if (claimsVelocities) CorrectedBuffers::process().release(this);
}

CscParams cscParamsOf(const Settings& settings) {
  CscParams params;
  params.density = settings.cscDensity;
  params.chunkElements = settings.cscChunkElements;
  params.warmupCalls = static_cast<int64_t>(settings.cscWarmupCalls);
  params.momentum = static_cast<float>(settings.cscMomentum);
  params.momentumDecay = static_cast<float>(settings.cscMomentumDecay);
  params.momentumOutput = settings.cscMomentumOutput;
  return params;
}

float clipScale(const float* values, size_t count, double limit) {
  if (!(limit > 0)) return 1.0f;
  double squares = 0;
  for (size_t i = 0; i < count; ++i) squares += static_cast<double>(values[i]) * values[i];
  const double norm = std::sqrt(squares);
  return norm > limit ? static_cast<float>(limit / norm) : 1.0f;
}

double relativeL2Error(const float* got, const float* exact, size_t count) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(exact[i]);
    difference += d * d;
    norm += static_cast<double>(exact[i]) * static_cast<double>(exact[i]);
  }
  if (norm == 0) return difference == 0 ? 0 : INFINITY;
  return std::sqrt(difference / norm);
}

Status runLossyAllreduce(const Plan& plan, const Settings& settings, size_t count,
                         const float* send, float* recv, const std::vector<ResidualKey>& keys,
                         const LossyTarget& target, LossyState& state, LossyRecord* record) {
  *record = LossyRecord{};
  record->modes = plan.lossy;
  record->bytesIn = count * sizeof(float);
  record->commSize = target.transport.size();
  target.transport.operationStarted(
      {plan.lossy.sparse ? "sparse (CSC) allreduce" : "compressed allreduce",
       static_cast<int64_t>(count), DType::kFloat32, RedOp::kSum});
  ++state.calls;
  const bool shadow = settings.shadowEvery > 0 && state.calls % settings.shadowEvery == 0;
  float* exact = nullptr;
  if (shadow) {
    exact = reinterpret_cast<float*>(state.exact.reserve(count * sizeof(float)));
    if (exact == nullptr && count > 0) {
      return Status::error(StatusCode::kOutOfMemory, "cannot allocate the shadow result");
    }
    GFSHIM_RETURN_IF_ERROR(exactAllreduce(plan, count, send, exact, target));
  }
  const uint64_t start = target.transport.bytesPosted();
  if (plan.lossy.sparse) {
    std::vector<CscResidual*> parts;
    CscResidual* residual = residualFor(keys, count, state, &parts);
    const int64_t callsBefore = residual != nullptr ? residual->callsSeen : 0;
    const float* input = clippedInput(settings, target.transport.size(), send, count, keys, state);
    CscParams params = cscParamsOf(settings);
    params.dense = plan.lossy.denseMomentum;
    // An agreed setting, so every rank runs the agreement.
    const bool handsBackGradient = cscHandsBackGradient(params);
    if (handsBackGradient) {
      GFSHIM_RETURN_IF_ERROR(agreeOnDelivered(parts, residual, target, state));
    }
    EngineCscDense dense(plan, settings, target, state);
    CscOutcome outcome;
    const Status status =
        cscAllreduce(params, residual, input, recv, count, dense, state.csc, &outcome);
    if (handsBackGradient && residual != nullptr) {
      stampDelivered(parts, state.calls, status.isOk());
    }
    if (residual == &state.bucketResidual) scatterResidual(*residual, callsBefore, parts);
    GFSHIM_RETURN_IF_ERROR(status);
    record->redone = dense.redone;
    if (outcome.mode == CscMode::kSparse) {
      record->sparseElements = count;
      record->sentElements = outcome.elementsSent;
    }
    if (outcome.momentumCorrected) record->momentumElements = count;
    if (input != send) record->clippedElements = count;
  } else {
    GFSHIM_RETURN_IF_ERROR(
        denseLossy(plan, settings, count, send, recv, target, state, &record->redone));
  }
  record->wireBytes = target.transport.bytesPosted() - start;
  if (shadow) {
    record->shadowed = true;
    record->shadowError = relativeL2Error(recv, exact, count);
  }
  return Status::ok();
}

}  // namespace gfshim
