// The kernels of cuda/gpu_kernels.h that the NCCL plugin launches, emulated by their CPU
// references (the ones tests/gpu/gpu_kernels_test.cpp holds the real kernels to) on the fake
// driver's device memory, in stream order (emulated_gpu.h). A pointer that is not device memory
// ends the process, as the kernel would fault. What the plugin runs here is the plugin's logic,
// not the kernels: those are tested on a GPU only.
#include <cmath>
#include <cstring>
#include <vector>

#include "compress/csc.h"
#include "emulated_gpu.h"
#include "gpu_kernels.h"

namespace gfshim::cuda {
namespace {

template <typename T>
T* view(const void* pointer, size_t count, const char* what) {
  return static_cast<T*>(emulated::deviceView(pointer, count * sizeof(T), what));
}

// The offsets cscGatherDevice writes: each selected chunk's start in the packed values, then
// the packed length.
void writePackedOffsets(size_t count, size_t chunkElements, const uint32_t* selected, size_t k,
                        uint64_t* offsets) {
  uint64_t at = 0;
  for (size_t i = 0; i < k; ++i) {
    offsets[i] = at;
    at += cscChunkLength(count, chunkElements, selected[i]);
  }
  offsets[k] = at;
}

}  // namespace

int encodeHalfDevice(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n,
                     void* stream) {
  if (n == 0) return 0;
  const float* from = view<const float>(in, n, "encodeHalfDevice (in)");
  uint16_t* to = view<uint16_t>(out, n, "encodeHalfDevice (out)");
  emulated::enqueue(stream, [=] {
    encodeHalf(format, from, scale, to, n);
    return 0;
  });
  return 0;
}

int decodeHalfDevice(HalfFormat format, const uint16_t* in, float scale, float* out, size_t n,
                     void* stream) {
  if (n == 0) return 0;
  const uint16_t* from = view<const uint16_t>(in, n, "decodeHalfDevice (in)");
  float* to = view<float>(out, n, "decodeHalfDevice (out)");
  emulated::enqueue(stream, [=] {
    decodeHalf(format, from, to, n);
    if (scale != 1.0f) {
      for (size_t i = 0; i < n; ++i) to[i] *= scale;
    }
    return 0;
  });
  return 0;
}

int addAndChunkL1NormsDevice(float* residual, const float* send, size_t count, size_t chunkElements,
                             float* norms, void* stream) {
  if (count == 0) return 0;
  float* sum = view<float>(residual, count, "addAndChunkL1NormsDevice (residual)");
  const float* add = view<const float>(send, count, "addAndChunkL1NormsDevice (send)");
  float* out =
      view<float>(norms, cscChunkCount(count, chunkElements), "addAndChunkL1NormsDevice (norms)");
  emulated::enqueue(stream, [=] {
    addAndChunkL1Norms(sum, add, count, chunkElements, out);
    return 0;
  });
  return 0;
}

size_t selectTopChunksScratchBytes(size_t chunks) { return chunks * sizeof(uint32_t); }

int selectTopChunksDevice(const float* norms, size_t chunks, size_t k, uint32_t* selected,
                          void* scratch, size_t scratchBytes, void* stream) {
  if (k == 0 || chunks == 0) return 0;
  if (scratchBytes < selectTopChunksScratchBytes(chunks)) return 1;  // cudaErrorInvalidValue
  view<char>(scratch, scratchBytes, "selectTopChunksDevice (scratch)");
  const float* from = view<const float>(norms, chunks, "selectTopChunksDevice (norms)");
  uint32_t* to = view<uint32_t>(selected, k, "selectTopChunksDevice (selected)");
  emulated::enqueue(stream, [=] {
    std::vector<uint32_t> chosen;
    selectTopChunks(from, chunks, k, &chosen);
    std::memcpy(to, chosen.data(), k * sizeof(uint32_t));
    return 0;
  });
  return 0;
}

int cscGatherDevice(const float* data, size_t count, size_t chunkElements, const uint32_t* selected,
                    size_t k, uint64_t* packedOffsets, float* packed, void* stream) {
  const float* from = view<const float>(data, count, "cscGatherDevice (data)");
  const uint32_t* chosen = view<const uint32_t>(selected, k, "cscGatherDevice (selected)");
  uint64_t* offsets = view<uint64_t>(packedOffsets, k + 1, "cscGatherDevice (offsets)");
  // The packed length is known only once the selection ran: checked then.
  emulated::enqueue(stream, [=] {
    writePackedOffsets(count, chunkElements, chosen, k, offsets);
    float* to = view<float>(packed, offsets[k], "cscGatherDevice (packed)");
    cscPack(from, count, chunkElements, chosen, k, to);
    return 0;
  });
  return 0;
}

int cscScatterDevice(const float* summed, size_t count, size_t chunkElements,
                     const uint32_t* selected, size_t k, const uint64_t* packedOffsets, float* recv,
                     float* residual, void* stream) {
  const uint32_t* chosen = view<const uint32_t>(selected, k, "cscScatterDevice (selected)");
  const uint64_t* offsets =
      view<const uint64_t>(packedOffsets, k + 1, "cscScatterDevice (offsets)");
  float* to = view<float>(recv, count, "cscScatterDevice (recv)");
  float* kept =
      residual != nullptr ? view<float>(residual, count, "cscScatterDevice (residual)") : nullptr;
  emulated::enqueue(stream, [=] {
    const float* from = view<const float>(summed, offsets[k], "cscScatterDevice (summed)");
    cscUnpack(from, count, chunkElements, chosen, k, to);
    if (kept != nullptr) cscClearChunks(kept, count, chunkElements, chosen, k);
    return 0;
  });
  return 0;
}

int fusionGatherDevice(const FusionSlice* slices, size_t sliceCount, void* packed, void* stream) {
  if (sliceCount == 0) return 0;
  const FusionSlice* table = view<const FusionSlice>(slices, sliceCount, "fusionGatherDevice");
  emulated::enqueue(stream, [=] {  // the table's upload runs before, in stream order
    for (size_t i = 0; i < sliceCount; ++i) {
      const FusionSlice& slice = table[i];
      if (slice.bytes == 0) continue;
      std::memcpy(view<char>(packed, slice.offset + slice.bytes, "fusionGatherDevice (bucket)") +
                      slice.offset,
                  view<const char>(slice.tensor, slice.bytes, "fusionGatherDevice (tensor)"),
                  slice.bytes);
    }
    return 0;
  });
  return 0;
}

int fusionScatterDevice(const FusionSlice* slices, size_t sliceCount, const void* packed,
                        void* stream) {
  if (sliceCount == 0) return 0;
  const FusionSlice* table = view<const FusionSlice>(slices, sliceCount, "fusionScatterDevice");
  emulated::enqueue(stream, [=] {
    for (size_t i = 0; i < sliceCount; ++i) {
      const FusionSlice& slice = table[i];
      if (slice.bytes == 0) continue;
      std::memcpy(
          view<char>(slice.tensor, slice.bytes, "fusionScatterDevice (tensor)"),
          view<const char>(packed, slice.offset + slice.bytes, "fusionScatterDevice (bucket)") +
              slice.offset,
          slice.bytes);
    }
    return 0;
  });
  return 0;
}

int anyNonFiniteDevice(const float* data, size_t n, int* flag, void* stream) {
  if (n == 0) return 0;
  const float* values = view<const float>(data, n, "anyNonFiniteDevice (data)");
  int* out = view<int>(flag, 1, "anyNonFiniteDevice (flag)");
  emulated::enqueue(stream, [=] {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) {
        *out = 1;
        break;
      }
    }
    return 0;
  });
  return 0;
}

}  // namespace gfshim::cuda
