#include "engine/lossy_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "algo/compressed_ring.h"
#include "algo/ring_schedule.h"
#include "algo/torus_allreduce.h"
#include "common/log.h"
#include "compress/half_wire_steps.h"
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

// The residual of the call: the key's own entry, or the operations' entries gathered into the
// state's bucket residual (nullptr when any of them is refused by the memory cap).
CscResidual* residualFor(const std::vector<ResidualKey>& keys, size_t count, LossyState& state,
                         std::vector<CscResidual*>* parts) {
  parts->clear();
  for (const ResidualKey& key : keys) {
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
    parts->push_back(entry);
  }
  if (parts->size() == 1) return parts->front();
  CscResidual& bucket = state.bucketResidual;
  if (bucket.count < count || !bucket.values) {
    bucket.values.reset(new (std::nothrow) float[count]);
    if (!bucket.values) return nullptr;
  }
  bucket.count = count;
  bucket.callsSeen = INT64_MAX;
  size_t offset = 0;
  for (CscResidual* part : *parts) {
    std::memcpy(bucket.data() + offset, part->data(), part->count * sizeof(float));
    offset += part->count;
    bucket.callsSeen = std::min(bucket.callsSeen, part->callsSeen);
  }
  return &bucket;
}

void scatterResidual(const CscResidual& bucket, int64_t callsBefore,
                     const std::vector<CscResidual*>& parts) {
  const bool counted = bucket.callsSeen > callsBefore;
  size_t offset = 0;
  for (CscResidual* part : parts) {
    std::memcpy(part->data(), bucket.values.get() + offset, part->count * sizeof(float));
    offset += part->count;
    if (counted) ++part->callsSeen;
  }
}

}  // namespace

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
  const bool shadow = settings.shadowEvery > 0 && ++state.calls % settings.shadowEvery == 0;
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
    EngineCscDense dense(plan, settings, target, state);
    CscParams params;
    params.density = settings.cscDensity;
    params.chunkElements = settings.cscChunkElements;
    params.warmupCalls = static_cast<int64_t>(settings.cscWarmupCalls);
    CscOutcome outcome;
    const Status status =
        cscAllreduce(params, residual, send, recv, count, dense, state.csc, &outcome);
    if (residual == &state.bucketResidual) scatterResidual(*residual, callsBefore, parts);
    GFSHIM_RETURN_IF_ERROR(status);
    record->redone = dense.redone;
    if (outcome.mode == CscMode::kSparse) {
      record->sparseElements = count;
      record->sentElements = outcome.elementsSent;
    }
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
