#include "compress/csc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>

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

void resetEntry(CscResidual* entry) {
  std::fill(entry->values.get(), entry->values.get() + entry->count, 0.0f);
  entry->callsSeen = 0;
}

Status denseCall(CscMode mode, const float* send, float* recv, size_t count, CscDense& dense,
                 CscOutcome* outcome) {
  outcome->mode = mode;
  outcome->elementsSent = count;
  return dense.allreduceValues(send, recv, count);
}

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
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    if (found->second->count == count) return found->second.get();
    bytesHeld_ -= found->second->count * sizeof(float);
    entries_.erase(found);
  }
  if (count > (capBytes_ - bytesHeld_) / sizeof(float)) return nullptr;
  auto entry = std::make_unique<CscResidual>();
  entry->values.reset(new (std::nothrow) float[count]());
  if (!entry->values) return nullptr;
  entry->count = count;
  bytesHeld_ += count * sizeof(float);
  CscResidual* result = entry.get();
  entries_.emplace(key, std::move(entry));
  return result;
}

void CscResidualStore::dropComm(uint64_t commId) {
  auto first = entries_.lower_bound(Key{commId, 0});
  auto end = first;
  while (end != entries_.end() && end->first.first == commId) {
    bytesHeld_ -= end->second->count * sizeof(float);
    ++end;
  }
  entries_.erase(first, end);
}

Status cscAllreduce(const CscParams& params, CscResidual* entry, const float* send, float* recv,
                    size_t count, CscDense& dense, CscScratch& scratch, CscOutcome* outcome) {
  CscOutcome ignored;
  CscOutcome& result = outcome != nullptr ? *outcome : ignored;
  result = CscOutcome{};
  if (params.chunkElements == 0) {
    return Status::error(StatusCode::kInvalidArgument, "CSC chunk size must be positive");
  }
  if (!(params.density > 0.0 && params.density <= 1.0)) {
    return Status::error(StatusCode::kInvalidArgument, "CSC density must be in (0, 1]");
  }
  if (entry != nullptr && entry->count != count) {
    return Status::error(StatusCode::kInternal, "CSC residual entry of another element count");
  }

  const size_t chunks = cscChunkCount(count, params.chunkElements);
  CscMode localMode = CscMode::kSparse;
  if (entry == nullptr) {
    localMode = CscMode::kDenseNoEntry;
  } else if (entry->callsSeen < params.warmupCalls) {
    localMode = CscMode::kDenseWarmup;
  } else if (chunks > std::numeric_limits<uint32_t>::max()) {
    localMode = CscMode::kDenseTooManyChunks;
  }
  // Entries, and so warm-up counts and the memory cap, follow each rank's own buffer addresses:
  // whether the call runs sparse is agreed before anything else is sent.
  bool anyDense = false;
  GFSHIM_RETURN_IF_ERROR(dense.agreeDense(localMode != CscMode::kSparse, &anyDense));
  if (anyDense) {
    const CscMode mode = localMode != CscMode::kSparse ? localMode : CscMode::kDenseByPeer;
    Status status = denseCall(mode, send, recv, count, dense, &result);
    if (entry == nullptr) return status;
    if (!status.isOk()) {
      resetEntry(entry);
      return status;
    }
    ++entry->callsSeen;
    return Status::ok();
  }

  result.mode = CscMode::kSparse;
  result.chunks = chunks;
  if (count == 0) {
    ++entry->callsSeen;
    return Status::ok();
  }
  // Scratch first: running out of memory here leaves the entry as it was and nothing sent.
  const size_t k = cscSelectedCount(chunks, params.density);
  const size_t maxPacked = std::min(count, k * params.chunkElements);
  auto* norms = reinterpret_cast<float*>(scratch.norms.reserve(chunks * sizeof(float)));
  auto* packed = reinterpret_cast<float*>(scratch.packed.reserve(maxPacked * sizeof(float)));
  if (norms == nullptr || packed == nullptr) {
    return Status::error(StatusCode::kOutOfMemory, "cannot allocate CSC scratch");
  }
  scratch.selected.reserve(chunks);

  // From here on send is consumed into the residual (which then holds g), so recv may alias it.
  float* residual = entry->data();
  addAndChunkL1Norms(residual, send, count, params.chunkElements, norms);
  Status status = dense.allreduceNorms(norms, chunks);
  if (!status.isOk()) {
    resetEntry(entry);
    return status;
  }
  selectTopChunks(norms, chunks, k, &scratch.selected);
  const uint32_t* selected = scratch.selected.data();
  const size_t n = cscPack(residual, count, params.chunkElements, selected, k, packed);
  result.selectedChunks = k;
  result.elementsSent = n;
  result.normsSent = chunks;
  status = dense.allreduceValues(packed, packed, n);
  if (!status.isOk()) {
    resetEntry(entry);
    return status;
  }
  cscUnpack(packed, count, params.chunkElements, selected, k, recv);
  cscClearChunks(residual, count, params.chunkElements, selected, k);
  ++entry->callsSeen;
  return Status::ok();
}

}  // namespace gfshim
