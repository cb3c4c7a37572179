#include "compress/csc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>

#include "compress/csc_steps.h"

namespace gfshim {
namespace {

// Independent partial sums per chunk: enough to fill two AVX-512 or four SSE registers, so the
// loop is bound by memory, not by the latency of one dependent add chain.
constexpr size_t kNormLanes = 16;

// Lanes folded in halves (8+8, 4+4, 2+2, 1+1): a fixed order, whatever the vector width.
inline float foldLanes(float (&lanes)[kNormLanes]) {
  for (size_t width = kNormLanes / 2; width > 0; width /= 2) {
    for (size_t j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  }
  return lanes[0];
}

float chunkNorm(const float* __restrict data, size_t n) {
  float lanes[kNormLanes] = {};
  size_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes) {
    for (size_t j = 0; j < kNormLanes; ++j) lanes[j] += std::fabs(data[i + j]);
  }
  for (size_t j = 0; i + j < n; ++j) lanes[j] += std::fabs(data[i + j]);
  return foldLanes(lanes);
}

// The same lanes and order as chunkNorm over the updated residual, so the bits agree.
float addAndChunkNorm(float* __restrict residual, const float* __restrict send, size_t n) {
  float lanes[kNormLanes] = {};
  size_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes) {
    for (size_t j = 0; j < kNormLanes; ++j) {
      const float g = residual[i + j] + send[i + j];
      residual[i + j] = g;
      lanes[j] += std::fabs(g);
    }
  }
  for (size_t j = 0; i + j < n; ++j) {
    const float g = residual[i + j] + send[i + j];
    residual[i + j] = g;
    lanes[j] += std::fabs(g);
  }
  return foldLanes(lanes);
}

// addAndChunkNorm under momentum correction: velocity = m velocity + send; residual = keep
// residual + velocity.
float momentumAddAndChunkNorm(float* __restrict residual, float* __restrict velocity,
                              const float* __restrict send, size_t n, float m, float keep) {
  float lanes[kNormLanes] = {};
  size_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes) {
    for (size_t j = 0; j < kNormLanes; ++j) {
      const float u = m * velocity[i + j] + send[i + j];
      velocity[i + j] = u;
      const float v = keep * residual[i + j] + u;
      residual[i + j] = v;
      lanes[j] += std::fabs(v);
    }
  }
  for (size_t j = 0; i + j < n; ++j) {
    const float u = m * velocity[i + j] + send[i + j];
    velocity[i + j] = u;
    const float v = keep * residual[i + j] + u;
    residual[i + j] = v;
    lanes[j] += std::fabs(v);
  }
  return foldLanes(lanes);
}

// Strict total order of chunks by importance: NaN norms first (by index), then norms
// descending, equal norms by index. Identical norms on every rank give identical selections.
struct MoreImportant {
  const float* norms;
  bool operator()(uint32_t a, uint32_t b) const {
    const float x = norms[a];
    const float y = norms[b];
    const bool xNan = std::isnan(x);
    const bool yNan = std::isnan(y);
    if (xNan != yNan) return xNan;
    if (!xNan && x != y) return x > y;
    return a < b;
  }
};

}  // namespace

size_t cscChunkCount(size_t count, size_t chunkElements) {
  return count / chunkElements + (count % chunkElements != 0 ? 1 : 0);
}

size_t cscSelectedCount(size_t chunks, double density) {
  if (chunks == 0) return 0;
  if (!(density < 1.0)) return chunks;  // >= 1 or NaN
  if (!(density > 0.0)) return 1;
  // A product that is a whole number but for the rounding of density (0.07 * 100 is
  // 7.000000000000001) counts as that number, not the next one.
  const double exact = density * static_cast<double>(chunks);
  const double nearest = std::round(exact);
  const double k = std::fabs(exact - nearest) <= 1e-9 * nearest ? nearest : std::ceil(exact);
  return std::clamp(static_cast<size_t>(k), size_t{1}, chunks);
}

size_t cscChunkLength(size_t count, size_t chunkElements, size_t chunk) {
  const size_t begin = chunk * chunkElements;
  return begin >= count ? 0 : std::min(chunkElements, count - begin);
}

void chunkL1Norms(const float* data, size_t count, size_t chunkElements, float* norms) {
  const size_t chunks = cscChunkCount(count, chunkElements);
  for (size_t c = 0; c < chunks; ++c) {
    norms[c] = chunkNorm(data + c * chunkElements, cscChunkLength(count, chunkElements, c));
  }
}

void addAndChunkL1Norms(float* residual, const float* send, size_t count, size_t chunkElements,
                        float* norms) {
  const size_t chunks = cscChunkCount(count, chunkElements);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t offset = c * chunkElements;
    norms[c] =
        addAndChunkNorm(residual + offset, send + offset, cscChunkLength(count, chunkElements, c));
  }
}

void momentumAddAndChunkL1Norms(float* residual, float* velocity, const float* send, size_t count,
                                size_t chunkElements, float momentum, float decay, float* norms) {
  const size_t chunks = cscChunkCount(count, chunkElements);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t offset = c * chunkElements;
    norms[c] = momentumAddAndChunkNorm(residual + offset, velocity + offset, send + offset,
                                       cscChunkLength(count, chunkElements, c), momentum,
                                       1.0f - decay);
  }
}

void momentumAccumulate(float* __restrict residual, float* __restrict velocity,
                        const float* __restrict send, size_t count, float momentum, float decay) {
  const float keep = 1.0f - decay;
  for (size_t i = 0; i < count; ++i) {
    const float u = momentum * velocity[i] + send[i];
    velocity[i] = u;
    residual[i] = keep * residual[i] + u;
  }
}

void momentumToGradient(float* __restrict recv, float* __restrict delivered, size_t count,
                        float momentum) {
  for (size_t i = 0; i < count; ++i) {
    const float d = recv[i];
    recv[i] = d - momentum * delivered[i];
    delivered[i] = d;
  }
}

void selectTopChunks(const float* norms, size_t chunks, size_t k, std::vector<uint32_t>* selected) {
  std::vector<uint32_t>& out = *selected;
  k = std::min(k, chunks);
  out.resize(chunks);
  std::iota(out.begin(), out.end(), uint32_t{0});
  if (k == chunks) return;
  if (k == 0) {
    out.clear();
    return;
  }
  // Partition around the k-th most important chunk, then rescan by index: the chunks at or
  // before it in the order are exactly the top k, and the scan emits them ascending without a
  // sort.
  const MoreImportant before{norms};
  std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k - 1), out.end(),
                   before);
  const uint32_t last = out[k - 1];
  size_t written = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    if (c == last || before(c, last)) out[written++] = c;
  }
  out.resize(written);  // == k: the order is strict and total
}

size_t cscPack(const float* data, size_t count, size_t chunkElements, const uint32_t* selected,
               size_t selectedCount, float* packed) {
  size_t written = 0;
  for (size_t s = 0; s < selectedCount; ++s) {
    const size_t length = cscChunkLength(count, chunkElements, selected[s]);
    if (length == 0) continue;
    std::memcpy(packed + written, data + selected[s] * chunkElements, length * sizeof(float));
    written += length;
  }
  return written;
}

size_t cscUnpack(const float* summed, size_t count, size_t chunkElements, const uint32_t* selected,
                 size_t selectedCount, float* recv) {
  size_t read = 0;
  size_t filled = 0;  // recv[0, filled) is written
  for (size_t s = 0; s < selectedCount; ++s) {
    const size_t offset = selected[s] * chunkElements;
    const size_t length = cscChunkLength(count, chunkElements, selected[s]);
    if (length == 0) continue;
    if (offset > filled) std::memset(recv + filled, 0, (offset - filled) * sizeof(float));
    std::memcpy(recv + offset, summed + read, length * sizeof(float));
    read += length;
    filled = offset + length;
  }
  if (count > filled) std::memset(recv + filled, 0, (count - filled) * sizeof(float));
  return read;
}

void cscClearChunks(float* data, size_t count, size_t chunkElements, const uint32_t* selected,
                    size_t selectedCount) {
  for (size_t s = 0; s < selectedCount; ++s) {
    const size_t length = cscChunkLength(count, chunkElements, selected[s]);
    if (length > 0) std::memset(data + selected[s] * chunkElements, 0, length * sizeof(float));
  }
}

CscResidual* CscResidualStore::findOrCreate(uint64_t commId, uintptr_t address, size_t count) {
  const Key key{commId, address};
  bool fits = false;
  if (CscResidual* found = book_.find(key, count, &fits)) return found;
  if (!fits) return nullptr;
  CscResidual entry;
  entry.values.reset(new (std::nothrow) float[count]());
  if (!entry.values) return nullptr;
  if (arrays_ >= 2) {
    entry.velocity.reset(new (std::nothrow) float[count]());
    if (!entry.velocity) return nullptr;
  }
  if (arrays_ >= 3) {
    entry.delivered.reset(new (std::nothrow) float[count]());
    if (!entry.delivered) return nullptr;
  }
  entry.count = count;
  return book_.add(key, std::move(entry));
}

bool cscHandsBackGradient(const CscParams& params) {
  return params.momentum > 0 && params.momentumOutput == CscMomentumOutput::kGradient;
}

int cscArraysPerElement(const CscParams& params) {
  if (!(params.momentum > 0)) return 1;
  return cscHandsBackGradient(params) ? 3 : 2;
}

void CscResidualStore::dropComm(uint64_t commId) {
  book_.dropRange(Key{commId, 0}, Key{commId, std::numeric_limits<uintptr_t>::max()});
}

namespace {

// runCscSteps' primitives in host memory: the building blocks above, the residual entry as given,
// the scratch reused across calls, and the caller's collectives.
class HostCscBackend final : public CscBackend {
 public:
  HostCscBackend(CscResidual* entry, const float* send, float* recv, CscDense& dense,
                 CscScratch& scratch)
      : entry_(entry), send_(send), recv_(recv), dense_(dense), scratch_(scratch) {}

  // The dense step allocates what it needs itself (engine/lossy_allreduce.cpp), and the host
  // path is the last resort: it never declines.
  Status reserveDense(size_t) override { return Status::ok(); }
  Status findResidual(size_t count, int64_t** callsSeen) override {
    *callsSeen = nullptr;
    if (entry_ == nullptr) return Status::ok();
    if (entry_->count != count) {
      return Status::error(StatusCode::kInternal, "CSC residual entry of another element count");
    }
    *callsSeen = &entry_->callsSeen;
    return Status::ok();
  }
  Status reserveSparse(const CscShape& shape) override {
    norms_ = reinterpret_cast<float*>(scratch_.norms.reserve(shape.chunks * sizeof(float)));
    packed_ = reinterpret_cast<float*>(scratch_.packed.reserve(shape.maxPacked * sizeof(float)));
    if (norms_ == nullptr || packed_ == nullptr) {
      return Status::error(StatusCode::kOutOfMemory, "cannot allocate CSC scratch");
    }
    scratch_.selected.reserve(shape.chunks);
    return Status::ok();
  }
  // A host CscDense agrees on a bool; the host never reports kCannotRun (reserveDense).
  Status agree(CscReadiness mine, CscReadiness* agreed) override {
    bool anyDense = false;
    GFSHIM_RETURN_IF_ERROR(dense_.agreeDense(mine != CscReadiness::kSparse, &anyDense));
    *agreed = anyDense ? CscReadiness::kDense : CscReadiness::kSparse;
    return Status::ok();
  }
  Status allreduceDense(size_t count) override {
    return dense_.allreduceValues(send_, recv_, count);
  }
  Status allreduceDenseCorrected(const CscShape& shape) override {
    GFSHIM_RETURN_IF_ERROR(momentumState(shape));
    momentumAccumulate(entry_->data(), entry_->velocity.get(), send_, shape.count, shape.momentum,
                       shape.momentumDecay);
    GFSHIM_RETURN_IF_ERROR(dense_.allreduceValues(entry_->data(), recv_, shape.count));
    std::fill(entry_->data(), entry_->data() + shape.count, 0.0f);
    return Status::ok();
  }
  Status addAndNorms(const CscShape& shape) override {
    if (shape.momentum > 0) {
      GFSHIM_RETURN_IF_ERROR(momentumState(shape));
      momentumAddAndChunkL1Norms(entry_->data(), entry_->velocity.get(), send_, shape.count,
                                 shape.chunkElements, shape.momentum, shape.momentumDecay, norms_);
      return Status::ok();
    }
    addAndChunkL1Norms(entry_->data(), send_, shape.count, shape.chunkElements, norms_);
    return Status::ok();
  }
  Status allreduceNorms(const CscShape& shape) override {
    return dense_.allreduceNorms(norms_, shape.chunks);
  }
  Status selectTop(const CscShape& shape) override {
    selectTopChunks(norms_, shape.chunks, shape.selected, &scratch_.selected);
    return Status::ok();
  }
  Status pack(const CscShape& shape, size_t* packedCount) override {
    *packedCount = cscPack(entry_->data(), shape.count, shape.chunkElements,
                           scratch_.selected.data(), shape.selected, packed_);
    return Status::ok();
  }
  Status allreducePacked(size_t packedCount) override {
    return dense_.allreduceValues(packed_, packed_, packedCount);
  }
  Status unpackAndClear(const CscShape& shape) override {
    const uint32_t* selected = scratch_.selected.data();
    cscUnpack(packed_, shape.count, shape.chunkElements, selected, shape.selected, recv_);
    cscClearChunks(entry_->data(), shape.count, shape.chunkElements, selected, shape.selected);
    if (shape.momentum > 0) {
      cscClearChunks(entry_->velocity.get(), shape.count, shape.chunkElements, selected,
                     shape.selected);
    }
    return Status::ok();
  }
  Status momentumToGradient(const CscShape& shape) override {
    if (!entry_->delivered) {
      return Status::error(StatusCode::kInternal, "CSC residual entry without its delivered values");
    }
    gfshim::momentumToGradient(recv_, entry_->delivered.get(), shape.count, shape.momentum);
    return Status::ok();
  }
  Status finish(bool) override { return Status::ok(); }
  void resetResidual() override {
    for (float* values : {entry_->values.get(), entry_->velocity.get(), entry_->delivered.get()}) {
      if (values != nullptr) std::fill(values, values + entry_->count, 0.0f);
    }
  }

 private:
  CscResidual* entry_;
  const float* send_;
  float* recv_;
  CscDense& dense_;
  CscScratch& scratch_;

  Status momentumState(const CscShape&) const {
    if (!entry_->velocity) {
      return Status::error(StatusCode::kInternal, "CSC residual entry without its velocity");
    }
    return Status::ok();
  }

  float* norms_ = nullptr;
  float* packed_ = nullptr;
};

}  // namespace

Status cscAllreduce(const CscParams& params, CscResidual* entry, const float* send, float* recv,
                    size_t count, CscDense& dense, CscScratch& scratch, CscOutcome* outcome) {
  HostCscBackend backend(entry, send, recv, dense, scratch);
  return runCscSteps(params, count, backend, outcome);
}

}  // namespace gfshim
