#include "compress/csc_steps.h"

#include <algorithm>
#include <limits>

namespace gfshim {
namespace {

Status checkParams(const CscParams& params) {
  if (params.chunkElements == 0) {
    return Status::error(StatusCode::kInvalidArgument, "CSC chunk size must be positive");
  }
  if (!(params.density > 0.0 && params.density <= 1.0)) {
    return Status::error(StatusCode::kInvalidArgument, "CSC density must be in (0, 1]");
  }
  if (!(params.momentum >= 0.0f && params.momentum < 1.0f)) {
    return Status::error(StatusCode::kInvalidArgument, "CSC momentum must be in [0, 1)");
  }
  if (!(params.momentumDecay >= 0.0f && params.momentumDecay <= 1.0f)) {
    return Status::error(StatusCode::kInvalidArgument, "CSC momentum decay must be in [0, 1]");
  }
  return Status::ok();
}

// What this rank alone would run, and the sizes of a sparse call; reserves its sparse scratch.
// An error other than kOutOfMemory from the backend ends the call.
Status localMode(const CscParams& params, const int64_t* callsSeen, CscBackend& backend,
                 CscShape* shape, CscMode* mode) {
  *mode = CscMode::kSparse;
  if (callsSeen == nullptr) {
    *mode = CscMode::kDenseNoEntry;
  } else if (params.dense) {
    *mode = CscMode::kDenseAsked;
  } else if (*callsSeen < params.warmupCalls) {
    *mode = CscMode::kDenseWarmup;
  } else if (shape->chunks > std::numeric_limits<uint32_t>::max()) {
    *mode = CscMode::kDenseTooManyChunks;  // chunk indices would not fit
  } else if (shape->count > 0) {
    shape->selected = cscSelectedCount(shape->chunks, params.density);
    shape->maxPacked = std::min(shape->count, shape->selected * shape->chunkElements);
    const Status reserved = backend.reserveSparse(*shape);
    if (!reserved.isOk()) {
      if (reserved.code() != StatusCode::kOutOfMemory) return reserved;
      *mode = CscMode::kDenseNoScratch;
    }
  }
  return Status::ok();
}

Status sparseSteps(const CscShape& shape, CscBackend& backend, size_t* packedCount) {
  GFSHIM_RETURN_IF_ERROR(backend.addAndNorms(shape));
  GFSHIM_RETURN_IF_ERROR(backend.allreduceNorms(shape));
  GFSHIM_RETURN_IF_ERROR(backend.selectTop(shape));
  GFSHIM_RETURN_IF_ERROR(backend.pack(shape, packedCount));
  GFSHIM_RETURN_IF_ERROR(backend.allreducePacked(*packedCount));
  return backend.unpackAndClear(shape);
}

}  // namespace

Status runCscSteps(const CscParams& params, size_t count, CscBackend& backend,
                   CscOutcome* outcome) {
  CscOutcome ignored;
  CscOutcome& result = outcome != nullptr ? *outcome : ignored;
  result = CscOutcome{};
  GFSHIM_RETURN_IF_ERROR(checkParams(params));

  // The dense form's scratch first: any rank may ask for a dense call.
  const Status denseReserved = backend.reserveDense(count);
  if (!denseReserved.isOk() && denseReserved.code() != StatusCode::kOutOfMemory) {
    return denseReserved;
  }
  int64_t* callsSeen = nullptr;
  GFSHIM_RETURN_IF_ERROR(backend.findResidual(count, &callsSeen));
  CscShape shape;
  shape.count = count;
  shape.chunkElements = params.chunkElements;
  shape.chunks = cscChunkCount(count, params.chunkElements);
  shape.momentum = callsSeen != nullptr ? params.momentum : 0.0f;
  shape.momentumDecay = params.momentumDecay;
  CscMode local = CscMode::kSparse;
  GFSHIM_RETURN_IF_ERROR(localMode(params, callsSeen, backend, &shape, &local));

  // Entries, and so warm-up counts and the memory cap, follow each rank's own buffer addresses,
  // and memory is each rank's own: how the call runs is agreed before anything else is sent.
  const CscReadiness mine = !denseReserved.isOk()       ? CscReadiness::kCannotRun
                            : local != CscMode::kSparse ? CscReadiness::kDense
                                                        : CscReadiness::kSparse;
  CscReadiness agreed = CscReadiness::kSparse;
  GFSHIM_RETURN_IF_ERROR(backend.agree(mine, &agreed));
  if (agreed == CscReadiness::kCannotRun) {
    result.mode = CscMode::kDeclined;
    // Only a device backend's reserveDense can fail (the host's dense step needs none ahead).
    return !denseReserved.isOk()
               ? denseReserved
               : Status::error(StatusCode::kOutOfMemory,
                               "another rank has no device memory for this CSC call");
  }

  const bool sparse = agreed == CscReadiness::kSparse;
  Status status = Status::ok();
  if (!sparse) {
    result.mode = local != CscMode::kSparse ? local : CscMode::kDenseByPeer;
    result.elementsSent = count;
    status = shape.momentum > 0 ? backend.allreduceDenseCorrected(shape)
                                : backend.allreduceDense(count);
  } else {
    result.mode = CscMode::kSparse;
    result.chunks = shape.chunks;
    if (count > 0) {
      result.selectedChunks = shape.selected;
      result.normsSent = shape.chunks;
      status = sparseSteps(shape, backend, &result.elementsSent);
    }
  }
  if (status.isOk() && shape.momentum > 0 && cscHandsBackGradient(params)) {
    status = backend.momentumToGradient(shape);
  }
  if (status.isOk()) status = backend.finish(sparse);
  if (callsSeen == nullptr) return status;
  if (!status.isOk()) {
    *callsSeen = 0;  // the warm-up restarts
    backend.resetResidual();
    return status;
  }
  ++*callsSeen;
  result.momentumCorrected = shape.momentum > 0;
  return Status::ok();
}

}  // namespace gfshim
