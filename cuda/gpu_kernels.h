// CUDA kernels of the GPU path (DESIGN.md, "cuda/"): fp32 <-> fp16/bf16 conversion bit-identical
// to the CPU codec (src/compress/half_codec.h), the CSC building blocks (chunk L1 norms in the
// CPU's lane order, top-k chunk selection without sorting N elements, gather/scatter of the
// selected chunks), fusion-buffer gather/scatter of many small tensors in one launch, and float
// reductions.
//
// Every function enqueues work on `stream` (a cudaStream_t passed as void*, so callers need no CUDA
// header) and returns at once with a cudaError_t as int (0 = success, launch errors only; errors of
// the work itself show at the next synchronization). Pointers are device pointers unless named
// *Host. n == 0 launches nothing and succeeds. Each kernel's CPU reference is named beside it; the
// tests in tests/gpu/ compare the two over boundary classes and random data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/types.h"
#include "compress/half_codec.h"

namespace gfshim::cuda {

// out[i] = to16(in[i] * scale); reference encodeHalf (same bits, NaN rule included).
int encodeHalfDevice(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n,
                     void* stream);
// out[i] = from16(in[i]) * scale (scale 1.0f: exactly decodeHalf; otherwise one fp32 product).
int decodeHalfDevice(HalfFormat format, const uint16_t* in, float scale, float* out, size_t n,
                     void* stream);

// norms[c] = sum |data| over chunk c, with the CPU's 16 lanes (element i in lane i % 16 of its
// chunk, lanes folded 8+8, 4+4, 2+2, 1+1): the same bits as chunkL1Norms.
int chunkL1NormsDevice(const float* data, size_t count, size_t chunkElements, float* norms,
                       void* stream);
// residual[i] += send[i], then norms of the updated residual (same bits as addAndChunkL1Norms).
int addAndChunkL1NormsDevice(float* residual, const float* send, size_t count, size_t chunkElements,
                             float* norms, void* stream);

// Scratch of selectTopChunksDevice for `chunks` chunks, in bytes (device memory the caller owns).
size_t selectTopChunksScratchBytes(size_t chunks);
// The k chunks first in the order (norm descending, NaN before any number, index ascending),
// written to selected[0..k) in ascending index order: the same set and order as selectTopChunks.
// Cost O(chunks) per pass (radix select / sort over the chunk keys), never over N elements.
int selectTopChunksDevice(const float* norms, size_t chunks, size_t k, uint32_t* selected,
                          void* scratch, size_t scratchBytes, void* stream);

// packed = the selected chunks of data, laid out as cscPack does (ascending chunk order, the last
// chunk possibly short). `packedOffsets` (k + 1 entries, device, written by the function) gets
// each selected chunk's start in `packed`; packedOffsets[k] is the element count.
int cscGatherDevice(const float* data, size_t count, size_t chunkElements, const uint32_t* selected,
                    size_t k, uint64_t* packedOffsets, float* packed, void* stream);
// recv = summed in the selected chunks, 0 elsewhere (as cscUnpack), and the selected chunks of
// residual set to 0 (as cscClearChunks; residual may be null). packedOffsets as cscGatherDevice
// wrote them.
int cscScatterDevice(const float* summed, size_t count, size_t chunkElements,
                     const uint32_t* selected, size_t k, const uint64_t* packedOffsets, float* recv,
                     float* residual, void* stream);

// One entry of a fusion bucket: `bytes` at `tensor`, at `offset` bytes into the packed buffer.
struct FusionSlice {
  const void* tensor;  // gather: read from; scatter: written to (cast away const)
  uint64_t offset;
  uint64_t bytes;
};
// packed[slice.offset, +bytes) = *slice.tensor for every slice, all in one launch. `slices` is a
// device array of `sliceCount` entries (the caller uploads it).
int fusionGatherDevice(const FusionSlice* slices, size_t sliceCount, void* packed, void* stream);
// *slice.tensor = packed[slice.offset, +bytes) for every slice, one launch.
int fusionScatterDevice(const FusionSlice* slices, size_t sliceCount, const void* packed,
                        void* stream);

// inout[i] = inout[i] (op) in[i] for float32 and float64 with kSum, kProd, kMax, kMin; reference
// cpuReduceFn (src/algo/reducer.h), same bits (no FMA contraction). Returns cudaErrorInvalidValue
// (1) for other types or ops.
int reduceDevice(DType dtype, RedOp op, const void* in, void* inout, size_t n, void* stream);

// *flag (device int) = 1 if any of data[0..n) is Inf or NaN, left unchanged otherwise (the caller
// zeroes it first): the fp16 overflow check.
int anyNonFiniteDevice(const float* data, size_t n, int* flag, void* stream);

}  // namespace gfshim::cuda
