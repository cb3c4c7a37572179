#include "engine/lossy_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "algo/compressed_ring.h"
#include "algo/ring_schedule.h"
#include "algo/torus_allreduce.h"
#include "common/log.h"
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

// The dense step: exact, or 16-bit on the wire with the overflow redo.
Status denseLossy(const Plan& plan, const Settings& settings, size_t count, const float* in,
                  float* out, const LossyTarget& target, LossyState& state, bool* redone) {
  if (plan.lossy.codec == WireCodec::kNone) return exactAllreduce(plan, count, in, out, target);
  const float* source = in;
  if (in == out && count > 0) {  // keep the input for a redo
    auto* copy = reinterpret_cast<float*>(state.inputCopy.reserve(count * sizeof(float)));
    if (copy == nullptr) {
      return Status::error(StatusCode::kOutOfMemory, "cannot copy the input of a lossy call");
    }
    std::memcpy(copy, in, count * sizeof(float));
    source = copy;
  }
  const HalfFormat format =
      plan.lossy.codec == WireCodec::kFp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
  const int ranks = target.transport.size();
  const float scale = settings.prescale ? 1.0f / static_cast<float>(ranks) : 1.0f;
  Status status;
  if (plan.algo == Algo::kTorus2d && target.grid != nullptr) {
    status = runCompressedTorusAllreduce(*target.grid, count, plan.segmentBytes, format, scale,
                                         target.transport, target.workspace, source, out);
  } else {
    const RingSchedule schedule(ranks, target.transport.rank(), count, sizeof(float),
                                plan.segmentBytes);
    status = runCompressedRing(schedule, RingPart::kAllreduce, format, scale, target.transport,
                               target.workspace, source, out);
  }
  GFSHIM_RETURN_IF_ERROR(status);
  if (settings.prescale) {
    const float factor = static_cast<float>(ranks);
    for (size_t i = 0; i < count; ++i) out[i] *= factor;
  }
  if (allFinite(out, count)) return Status::ok();
  *redone = true;
  return exactAllreduce(plan, count, source, out, target);
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
