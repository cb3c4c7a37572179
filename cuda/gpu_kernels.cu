// CUDA kernels of the GPU path: the launchers declared in gpu_kernels.h. Every kernel is a
// grid-stride loop over 256-thread blocks, launched on the caller's stream with
// cudaLaunchKernelEx (so the launch status is returned directly, not a stale cudaGetLastError).
//
// Bit-exactness with the CPU. The file is compiled with --fmad=false and every fp32/fp64
// operation that must round like the CPU is written as an explicit round-to-nearest intrinsic
// (__fmul_rn, __fadd_rn, ...); denormals are kept (nvcc's default -ftz=false). Special care:
//   * NaN: GPU arithmetic returns the canonical NaN 0x7fffffff, x86 returns the NaN operand
//     (quieted). Where a NaN's payload reaches the output (encode with scale != 1), the NaN is
//     passed through without the multiply, as the CPU does. Sums and products of NaNs (norms,
//     reduce kSum/kProd, decode with scale != 1) give *a* NaN whose payload may differ from the
//     CPU's; only the NaN-ness is part of the contract there.
//   * kMax/kMin are written exactly as the CPU's `x > y ? x : y` (never fmaxf), so NaN and ±0
//     pick the same operand: reduceDevice computes cpuReduceFn(op)(inout, in, inout).
//
// Kernels and their cost (N elements; "copy speed" means the bytes moved at HBM bandwidth):
//   encodeHalfKernel       read 4N, write 2N bytes; 8 elements per thread (two float4 in, one
//                          uint4 out) where both pointers can be 16-byte aligned together after
//                          a scalar head of < 8 elements, else scalar. The fp32 -> fp16/bf16
//                          rounding is the CPU's integer algorithm (half_codec.cpp), not
//                          __float2half, whose NaN and subnormal-input results differ.
//   decodeHalfKernel       read 2N, write 4N bytes; same vector shape.
//   chunkNormsKernel       read 4N (+ read 4N, write 4N for the add variant); one group of 16
//                          threads per chunk, thread l summing elements l, l+16, ... of the chunk
//                          sequentially (the CPU's lane l), 8 loads in flight per thread, then
//                          the 8+8, 4+4, 2+2, 1+1 fold with shuffles. Parallelism is 16 threads
//                          per chunk, so with few, huge chunks (chunks * 16 << 100K) it is
//                          latency-bound: the lane order forbids splitting a lane.
//   selection              O(chunks): a key per chunk (monotone uint32 of the norm, NaN first),
//                          a stable CUB radix sort of (key, index) pairs, then a radix sort of
//                          the first k indices to ascending order.
//   cscGatherKernel        read+write 4 * k * chunkElements bytes, flattened over the packed
//                          output (float4 where chunkElements % 4 == 0 and pointers align).
//   cscScatterKernel       read 4 * packed, write 4N (+ 4 * packed residual zeroes); tiles of
//                          4096 elements of recv, each thread finding its chunk's slot by a
//                          binary search in the selected list, narrowed per tile.
//   fusionCopyKernel       read+write the slices' bytes once. The slices are cut into 16 KiB
//                          tiles; each block walks the slice list in windows of 256 (a block
//                          scan of the tile counts), taking every gridDim-th tile. 16-byte
//                          vectors where source and destination agree modulo 16, 4-byte words
//                          modulo 4, else bytes. Overhead per block: sliceCount/256 block scans.
//   reduceKernel           read 2 * 4N (8N for double), write the same N; 16-byte vectors.
//   anyNonFiniteKernel     read 4N; float4, one plain store of 1 per thread that saw Inf/NaN.
//
// Preconditions beyond the header: pointers are naturally aligned for their element type (any
// cudaMalloc'd buffer plus an element offset is); the selected lists given to cscGatherDevice /
// cscScatterDevice are strictly ascending chunk indices below the chunk count (as
// selectTopChunksDevice writes them, and as cscUnpack requires), so selected chunk s starts at
// s * chunkElements in `packed` and only the last entry can be the short last chunk.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <utility>

#include "cuda/gpu_kernels.h"

namespace gfshim::cuda {
namespace {

constexpr int kBlockThreads = 256;
// Grid cap: 2^16 blocks of 256 threads is 16M threads, enough for one pass over 128M fp32 as
// 8-element vectors; the grid-stride loops cover anything larger.
constexpr size_t kMaxBlocks = size_t{1} << 16;
constexpr size_t kVectorBytes = 16;

cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned blocksFor(size_t threadsWanted) {
  const size_t blocks = (threadsWanted + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, kMaxBlocks));
}

// Launches `kernel` and returns the launch's own status.
template <typename... Params, typename... Args>
int launch(void (*kernel)(Params...), unsigned blocks, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kBlockThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = nullptr;
  config.numAttrs = 0;
  return static_cast<int>(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// How an element-wise kernel cuts [0, n): `head` scalar elements until both pointers are 16-byte
// aligned, `vectors` whole vectors of `width` elements, then a scalar tail. vectors == 0 (and
// head == 0) where the two pointers cannot be aligned together: all scalar.
struct VectorSplit {
  size_t head = 0;
  size_t vectors = 0;
};

VectorSplit splitFor(const void* a, size_t aElementBytes, const void* b, size_t bElementBytes,
                     size_t n, size_t width) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  VectorSplit split;
  if (x % aElementBytes != 0 || y % bElementBytes != 0) return split;
  const size_t head = ((kVectorBytes - x % kVectorBytes) % kVectorBytes) / aElementBytes;
  if (head > n || (y + head * bElementBytes) % kVectorBytes != 0) return split;
  split.head = head;
  split.vectors = (n - head) / width;
  return split;
}

size_t threadsFor(const VectorSplit& split, size_t n) {
  return split.vectors > 0 ? split.vectors : n;
}

__device__ __forceinline__ size_t globalThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t gridThreads() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// Runs vectorOp(v) for every whole vector and scalarOp(i) for the head and tail elements.
template <size_t kWidth, typename ScalarOp, typename VectorOp>
__device__ __forceinline__ void forEachSplit(size_t n, size_t head, size_t vectors,
                                             ScalarOp scalarOp, VectorOp vectorOp) {
  const size_t first = globalThread();
  const size_t stride = gridThreads();
  for (size_t v = first; v < vectors; v += stride) vectorOp(v);
  for (size_t i = first; i < head; i += stride) scalarOp(i);
  for (size_t i = head + vectors * kWidth + first; i < n; i += stride) scalarOp(i);
}

// ---- fp32 <-> fp16 / bf16: the integer algorithm of half_codec.cpp's scalar path ---------------

__device__ __forceinline__ uint16_t fp16FromFloat(float value) {
  const uint32_t bits = __float_as_uint(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, top 10 payload bits (VCVTPS2PH)
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (magnitude >= 0x38800000u) {  // >= 2^-14: fp16 normal; rebias, round the 13 dropped bits
    const uint32_t odd = (magnitude >> 13) & 1u;
    const uint32_t rounded = magnitude - (112u << 23) + 0xfffu + odd;
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // fp16 subnormal or zero (fp32 subnormals included, which all round to zero).
  const uint32_t exponent = magnitude >> 23;
  const uint32_t significand = (magnitude & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
  const uint32_t shift = 126u - (exponent != 0 ? exponent : 1u);  // >= 14 here
  if (shift > 24) return sign;
  uint32_t code = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (code & 1u) != 0)) ++code;
  return static_cast<uint16_t>(sign | code);
}

__device__ __forceinline__ float floatFromFp16(uint16_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x8000u) << 16;
  const uint32_t exponent = (code >> 10) & 0x1fu;
  const uint32_t mantissa = code & 0x3ffu;
  if (exponent == 0x1f) {  // Inf, or NaN made quiet (VCVTPH2PS)
    return __uint_as_float(sign | 0x7f800000u | (mantissa << 13) |
                           (mantissa != 0 ? 0x400000u : 0u));
  }
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return __uint_as_float(sign);
  // Subnormal: mantissa * 2^-24, normalized. Shifts until bit 10 is set: clz - 21.
  const uint32_t shift = static_cast<uint32_t>(__clz(mantissa)) - 21u;
  const uint32_t biased = 113u - shift;
  return __uint_as_float(sign | (biased << 23) | (((mantissa << shift) & 0x3ffu) << 13));
}

__device__ __forceinline__ uint16_t bf16FromFloat(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float floatFromBf16(uint16_t code) {
  return __uint_as_float(static_cast<uint32_t>(code) << 16);
}

// in * scale as the CPU computes it: one rounded product, and a NaN operand passed through (x86
// returns the NaN operand quieted, the GPU a canonical NaN; quieting never changes the 16-bit
// code, since both NaN rules set the quiet bit anyway).
__device__ __forceinline__ float scaled(float value, float scale) {
  if (isnan(value)) return value;
  if (isnan(scale)) return scale;
  return __fmul_rn(value, scale);
}

template <HalfFormat kFormat>
__device__ __forceinline__ uint16_t toHalf(float value) {
  if constexpr (kFormat == HalfFormat::kFp16) {
    return fp16FromFloat(value);
  } else {
    return bf16FromFloat(value);
  }
}

template <HalfFormat kFormat>
__device__ __forceinline__ float fromHalf(uint16_t code) {
  if constexpr (kFormat == HalfFormat::kFp16) {
    return floatFromFp16(code);
  } else {
    return floatFromBf16(code);
  }
}

__device__ __forceinline__ uint32_t packTwo(uint16_t low, uint16_t high) {
  return static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
}

constexpr size_t kCodecWidth = 8;  // elements per vector: 32 bytes of fp32, 16 bytes of codes

template <HalfFormat kFormat>
__global__ void encodeHalfKernel(const float* __restrict__ in, float scale,
                                 uint16_t* __restrict__ out, size_t n, size_t head,
                                 size_t vectors) {
  const auto* in4 = reinterpret_cast<const float4*>(in + head);
  auto* out8 = reinterpret_cast<uint4*>(out + head);
  forEachSplit<kCodecWidth>(
      n, head, vectors, [&](size_t i) { out[i] = toHalf<kFormat>(scaled(in[i], scale)); },
      [&](size_t v) {
        const float4 a = in4[2 * v];
        const float4 b = in4[2 * v + 1];
        uint4 codes;
        codes.x = packTwo(toHalf<kFormat>(scaled(a.x, scale)), toHalf<kFormat>(scaled(a.y, scale)));
        codes.y = packTwo(toHalf<kFormat>(scaled(a.z, scale)), toHalf<kFormat>(scaled(a.w, scale)));
        codes.z = packTwo(toHalf<kFormat>(scaled(b.x, scale)), toHalf<kFormat>(scaled(b.y, scale)));
        codes.w = packTwo(toHalf<kFormat>(scaled(b.z, scale)), toHalf<kFormat>(scaled(b.w, scale)));
        out8[v] = codes;
      });
}

// kScaled false: exactly from16 (a product by 1 would turn NaN payloads canonical).
template <HalfFormat kFormat, bool kScaled>
__device__ __forceinline__ float decodeOne(uint16_t code, float scale) {
  const float value = fromHalf<kFormat>(code);
  if constexpr (kScaled) {
    return __fmul_rn(value, scale);
  } else {
    return value;
  }
}

template <HalfFormat kFormat, bool kScaled>
__global__ void decodeHalfKernel(const uint16_t* __restrict__ in, float scale,
                                 float* __restrict__ out, size_t n, size_t head, size_t vectors) {
  const auto* in8 = reinterpret_cast<const uint4*>(in + head);
  auto* out4 = reinterpret_cast<float4*>(out + head);
  forEachSplit<kCodecWidth>(
      n, head, vectors, [&](size_t i) { out[i] = decodeOne<kFormat, kScaled>(in[i], scale); },
      [&](size_t v) {
        const uint4 codes = in8[v];
        const auto low = [](uint32_t word) { return static_cast<uint16_t>(word & 0xffffu); };
        const auto high = [](uint32_t word) { return static_cast<uint16_t>(word >> 16); };
        float4 a;
        float4 b;
        a.x = decodeOne<kFormat, kScaled>(low(codes.x), scale);
        a.y = decodeOne<kFormat, kScaled>(high(codes.x), scale);
        a.z = decodeOne<kFormat, kScaled>(low(codes.y), scale);
        a.w = decodeOne<kFormat, kScaled>(high(codes.y), scale);
        b.x = decodeOne<kFormat, kScaled>(low(codes.z), scale);
        b.y = decodeOne<kFormat, kScaled>(high(codes.z), scale);
        b.z = decodeOne<kFormat, kScaled>(low(codes.w), scale);
        b.w = decodeOne<kFormat, kScaled>(high(codes.w), scale);
        out4[2 * v] = a;
        out4[2 * v + 1] = b;
      });
}

// ---- Chunk L1 norms in the CPU's lane order --------------------------------------------------

constexpr unsigned kNormLanes = 16;  // csc.cpp's kNormLanes: element i of a chunk is in lane i % 16
constexpr unsigned kNormUnroll = 8;  // loads in flight per thread

__device__ __forceinline__ size_t chunkLength(size_t count, size_t chunkElements, size_t chunk) {
  const size_t begin = chunk * chunkElements;
  return begin >= count ? 0 : min(chunkElements, count - begin);
}

// kAdd false: norms of `data` (residual unused). kAdd true: residual += send first, the norm is
// over the updated residual (`data` is then the residual).
template <bool kAdd>
__global__ void chunkNormsKernel(float* __restrict__ residual, const float* __restrict__ send,
                                 const float* __restrict__ data, size_t count, size_t chunkElements,
                                 size_t chunks, float* __restrict__ norms) {
  const unsigned lane = threadIdx.x % kNormLanes;
  // The 16 threads of a group share a half warp; the shuffles name only them, since the other
  // half may already have left the loop.
  const unsigned groupMask = 0xffffu << (threadIdx.x & 16u);
  const size_t groups = gridThreads() / kNormLanes;
  for (size_t chunk = globalThread() / kNormLanes; chunk < chunks; chunk += groups) {
    const size_t begin = chunk * chunkElements;
    const size_t length = chunkLength(count, chunkElements, chunk);
    float sum = 0.0f;  // the CPU's lanes start at +0
    size_t i = lane;
    for (; i + (kNormUnroll - 1) * kNormLanes < length; i += kNormUnroll * kNormLanes) {
      float values[kNormUnroll];
      if constexpr (kAdd) {
        float addends[kNormUnroll];
#pragma unroll
        for (unsigned u = 0; u < kNormUnroll; ++u) {
          values[u] = residual[begin + i + u * kNormLanes];
          addends[u] = send[begin + i + u * kNormLanes];
        }
#pragma unroll
        for (unsigned u = 0; u < kNormUnroll; ++u) {
          values[u] = __fadd_rn(values[u], addends[u]);
          residual[begin + i + u * kNormLanes] = values[u];
        }
      } else {
#pragma unroll
        for (unsigned u = 0; u < kNormUnroll; ++u) values[u] = data[begin + i + u * kNormLanes];
      }
#pragma unroll
      for (unsigned u = 0; u < kNormUnroll; ++u) sum = __fadd_rn(sum, fabsf(values[u]));
    }
    for (; i < length; i += kNormLanes) {
      float value;
      if constexpr (kAdd) {
        value = __fadd_rn(residual[begin + i], send[begin + i]);
        residual[begin + i] = value;
      } else {
        value = data[begin + i];
      }
      sum = __fadd_rn(sum, fabsf(value));
    }
    // foldLanes: lanes[j] += lanes[j + width] for width 8, 4, 2, 1; lane 0 ends with the norm.
    for (unsigned width = kNormLanes / 2; width > 0; width /= 2) {
      sum = __fadd_rn(sum, __shfl_down_sync(groupMask, sum, width, kNormLanes));
    }
    if (lane == 0) norms[chunk] = sum;
  }
}

// ---- Top-k chunk selection ------------------------------------------------------------------

// Sort key, ascending = more important first: NaN 0, then norms descending; -0 and +0 share a
// key (the CPU's comparator finds them equal, so the index decides).
__device__ __forceinline__ uint32_t importanceKey(float norm) {
  uint32_t bits = __float_as_uint(norm);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0;
  if (bits == 0x80000000u) bits = 0;
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return ~ascending;  // never 0: that would be ascending 0xffffffff, a NaN
}

__global__ void importanceKeysKernel(const float* __restrict__ norms, uint32_t chunks,
                                     uint32_t* __restrict__ keys, uint32_t* __restrict__ indices) {
  for (size_t c = globalThread(); c < chunks; c += gridThreads()) {
    keys[c] = importanceKey(norms[c]);
    indices[c] = static_cast<uint32_t>(c);
  }
}

__global__ void iotaKernel(uint32_t* __restrict__ out, uint32_t n) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) out[i] = static_cast<uint32_t>(i);
}

// The scratch of selectTopChunksDevice: four arrays of `chunks` uint32 and CUB's temporary
// storage, each aligned to 256 bytes.
constexpr size_t kScratchAlign = 256;

size_t alignUp(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

struct SelectScratch {
  uint32_t* keysIn;
  uint32_t* keysOut;
  uint32_t* indicesIn;
  uint32_t* indicesOut;
  void* sortTemp;
  size_t sortTempBytes;
};

size_t selectArraysBytes(size_t chunks) { return 4 * alignUp(chunks * sizeof(uint32_t)); }

int bitsFor(uint32_t maxValue) {
  int bits = 1;
  while (bits < 32 && (maxValue >> bits) != 0) ++bits;
  return bits;
}

// CUB's temporary bytes for the two sorts (the same instantiations as the calls below).
cudaError_t sortTempBytes(uint32_t pairs, uint32_t keys, int keyBits, size_t* bytes) {
  size_t pairBytes = 0;
  size_t keyBytes = 0;
  cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, pairBytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), pairs, 0, 32);
  if (status != cudaSuccess) return status;
  status = cub::DeviceRadixSort::SortKeys(nullptr, keyBytes, static_cast<const uint32_t*>(nullptr),
                                          static_cast<uint32_t*>(nullptr), keys, 0, keyBits);
  if (status != cudaSuccess) return status;
  *bytes = std::max(pairBytes, keyBytes);
  return cudaSuccess;
}

// ---- CSC gather / scatter ------------------------------------------------------------------

__global__ void packedOffsetsKernel(size_t count, size_t chunkElements,
                                    const uint32_t* __restrict__ selected, size_t k,
                                    uint64_t* __restrict__ packedOffsets) {
  for (size_t s = globalThread(); s <= k; s += gridThreads()) {
    if (s < k) {
      packedOffsets[s] = static_cast<uint64_t>(s) * chunkElements;
    } else {
      packedOffsets[k] = static_cast<uint64_t>(k - 1) * chunkElements +
                         chunkLength(count, chunkElements, selected[k - 1]);
    }
  }
}

// packed[s * E + j] = data[selected[s] * E + j] for j < the chunk's length, flattened over units
// of kWidth elements (kWidth 4: float4, chunkElements % 4 == 0 and both pointers 16-aligned).
// IndexT: uint32_t where k * E fits, for a cheap division.
template <int kWidth, typename IndexT>
__global__ void cscGatherKernel(const float* __restrict__ data, size_t count, size_t chunkElements,
                                const uint32_t* __restrict__ selected, IndexT units,
                                float* __restrict__ packed) {
  const auto unitsPerChunk = static_cast<IndexT>(chunkElements / kWidth);
  for (size_t unit = globalThread(); unit < units; unit += gridThreads()) {
    const IndexT s = static_cast<IndexT>(unit) / unitsPerChunk;
    const size_t j = static_cast<size_t>(static_cast<IndexT>(unit) - s * unitsPerChunk) * kWidth;
    const size_t chunk = selected[s];
    const size_t length = chunkLength(count, chunkElements, chunk);
    const size_t from = chunk * chunkElements + j;
    const size_t to = static_cast<size_t>(s) * chunkElements + j;
    if constexpr (kWidth == 4) {
      if (j + 4 <= length) {
        *reinterpret_cast<float4*>(packed + to) = *reinterpret_cast<const float4*>(data + from);
        continue;
      }
    }
    for (size_t q = 0; j + q < length && q < static_cast<size_t>(kWidth); ++q) {
      packed[to + q] = data[from + q];
    }
  }
}

// First position in selected[lo, hi) whose chunk is >= chunk (hi if none).
__device__ __forceinline__ size_t lowerBound(const uint32_t* selected, size_t lo, size_t hi,
                                             size_t chunk) {
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (selected[mid] < chunk) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

constexpr int kScatterUnitsPerThread = 4;

// recv tile by tile (kBlockThreads * kScatterUnitsPerThread units of kWidth elements): every
// thread finds the first selected slot at or after the tile's first chunk (all threads of the
// block read the same entries: broadcasts), then each unit's slot in the few entries that can
// cover the tile.
template <int kWidth, typename IndexT>
__global__ void cscScatterKernel(const float* __restrict__ summed, size_t count,
                                 size_t chunkElements, const uint32_t* __restrict__ selected,
                                 size_t k, float* __restrict__ recv, float* __restrict__ residual) {
  constexpr size_t kTileElements = size_t{kBlockThreads} * kScatterUnitsPerThread * kWidth;
  const size_t tiles = (count + kTileElements - 1) / kTileElements;
  const auto elementsPerChunk = static_cast<IndexT>(chunkElements);
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t tileBegin = tile * kTileElements;
    const size_t firstChunk = tileBegin / chunkElements;
    const size_t firstSlot = lowerBound(selected, 0, k, firstChunk);
#pragma unroll
    for (int u = 0; u < kScatterUnitsPerThread; ++u) {
      const size_t i = tileBegin + (static_cast<size_t>(u) * kBlockThreads + threadIdx.x) * kWidth;
      if (i >= count) break;
      const IndexT chunk = static_cast<IndexT>(i) / elementsPerChunk;
      const size_t j = static_cast<size_t>(static_cast<IndexT>(i) - chunk * elementsPerChunk);
      // Ascending and distinct: the slot of `chunk`, if any, is within chunk - firstChunk
      // entries of firstSlot.
      const size_t slot =
          lowerBound(selected, firstSlot, min(k, firstSlot + (chunk - firstChunk) + 1), chunk);
      const bool hit = slot < k && selected[slot] == chunk;
      const size_t from = slot * chunkElements + j;
      if constexpr (kWidth == 4) {
        if (i + 4 <= count) {
          float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (hit) {
            value = *reinterpret_cast<const float4*>(summed + from);
            if (residual != nullptr) {
              *reinterpret_cast<float4*>(residual + i) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
          }
          *reinterpret_cast<float4*>(recv + i) = value;
          continue;
        }
      }
      for (size_t q = 0; q < static_cast<size_t>(kWidth) && i + q < count; ++q) {
        recv[i + q] = hit ? summed[from + q] : 0.0f;
        if (hit && residual != nullptr) residual[i + q] = 0.0f;
      }
    }
  }
}

// ---- Fusion gather / scatter -----------------------------------------------------------------

constexpr uint64_t kFusionTileBytes = 16384;  // 256 threads x 4 x 16-byte vectors

// dst[0, length) = src[0, length) by the whole block: 16-byte vectors (4 in flight per thread)
// where the two pointers agree modulo 16, words modulo 4, bytes otherwise.
__device__ void copyBytesBlock(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src,
                               uint64_t length) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  const unsigned t = threadIdx.x;
  const unsigned step = blockDim.x;
  if (((d ^ s) & 15u) == 0) {
    const uint64_t head = min(static_cast<uint64_t>((16u - (d & 15u)) & 15u), length);
    if (t < head) dst[t] = src[t];
    const uint64_t vectors = (length - head) / 16;
    const auto* from = reinterpret_cast<const uint4*>(src + head);
    auto* to = reinterpret_cast<uint4*>(dst + head);
    uint64_t v = t;
    for (; v + 3 * step < vectors; v += 4 * step) {
      const uint4 a = from[v];
      const uint4 b = from[v + step];
      const uint4 c = from[v + 2 * step];
      const uint4 e = from[v + 3 * step];
      to[v] = a;
      to[v + step] = b;
      to[v + 2 * step] = c;
      to[v + 3 * step] = e;
    }
    for (; v < vectors; v += step) to[v] = from[v];
    const uint64_t done = head + vectors * 16;
    if (t < length - done) dst[done + t] = src[done + t];
  } else if (((d ^ s) & 3u) == 0) {
    const uint64_t head = min(static_cast<uint64_t>((4u - (d & 3u)) & 3u), length);
    if (t < head) dst[t] = src[t];
    const uint64_t words = (length - head) / 4;
    const auto* from = reinterpret_cast<const uint32_t*>(src + head);
    auto* to = reinterpret_cast<uint32_t*>(dst + head);
    for (uint64_t w = t; w < words; w += step) to[w] = from[w];
    const uint64_t done = head + words * 4;
    if (t < length - done) dst[done + t] = src[done + t];
  } else {
    for (uint64_t b = t; b < length; b += step) dst[b] = src[b];
  }
}

template <bool kGather>
__global__ void __launch_bounds__(kBlockThreads)
    fusionCopyKernel(const FusionSlice* __restrict__ slices, size_t sliceCount,
                     uint8_t* __restrict__ packed) {
  using TileScan = cub::BlockScan<uint64_t, kBlockThreads>;
  __shared__ typename TileScan::TempStorage scanStorage;
  __shared__ uint64_t tilesThrough[kBlockThreads];  // inclusive prefix of tiles in the window
  const uint64_t blocks = gridDim.x;
  uint64_t tilesBefore = 0;  // tiles of the slices before this window
  for (size_t window = 0; window < sliceCount; window += kBlockThreads) {
    const size_t inWindow = min(static_cast<size_t>(kBlockThreads), sliceCount - window);
    const size_t own = window + threadIdx.x;
    const uint64_t tiles =
        own < sliceCount ? (slices[own].bytes + kFusionTileBytes - 1) / kFusionTileBytes : 0;
    uint64_t through = 0;
    uint64_t windowTiles = 0;
    TileScan(scanStorage).InclusiveSum(tiles, through, windowTiles);
    tilesThrough[threadIdx.x] = through;
    __syncthreads();
    // This block's tiles: global tile numbers t with t % gridDim.x == blockIdx.x.
    uint64_t tile = tilesBefore + (blockIdx.x + blocks - tilesBefore % blocks) % blocks;
    for (; tile < tilesBefore + windowTiles; tile += blocks) {
      const uint64_t local = tile - tilesBefore;
      // The slice holding `local`: the first with tilesThrough > local.
      size_t lo = 0;
      size_t hi = inWindow - 1;
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (tilesThrough[mid] > local) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      const FusionSlice slice = slices[window + lo];
      const uint64_t tileInSlice = local - (lo > 0 ? tilesThrough[lo - 1] : 0);
      const uint64_t begin = tileInSlice * kFusionTileBytes;
      const uint64_t length = min(kFusionTileBytes, slice.bytes - begin);
      auto* tensor = const_cast<uint8_t*>(static_cast<const uint8_t*>(slice.tensor)) + begin;
      uint8_t* buffer = packed + slice.offset + begin;
      if constexpr (kGather) {
        copyBytesBlock(buffer, tensor, length);
      } else {
        copyBytesBlock(tensor, buffer, length);
      }
    }
    tilesBefore += windowTiles;
    __syncthreads();  // scanStorage and tilesThrough are reused by the next window
  }
}

int multiprocessorCount() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      count <= 0) {
    return 132;  // an H100/H200; only the grid size depends on it
  }
  return count;
}

int fusionCopy(bool gather, const FusionSlice* slices, size_t sliceCount, const void* packed,
               cudaStream_t stream) {
  if (sliceCount == 0) return cudaSuccess;
  // Eight 256-thread blocks per SM fill it; with many slices fewer blocks, since every block
  // scans the whole slice list (bounded to ~16M descriptor reads in all).
  const auto multiprocessors = static_cast<size_t>(multiprocessorCount());
  const size_t bounded = (size_t{1} << 24) / sliceCount;
  const auto blocks =
      static_cast<unsigned>(std::max(multiprocessors, std::min(multiprocessors * 8, bounded)));
  auto* buffer = const_cast<uint8_t*>(static_cast<const uint8_t*>(packed));
  return gather ? launch(fusionCopyKernel<true>, blocks, stream, slices, sliceCount, buffer)
                : launch(fusionCopyKernel<false>, blocks, stream, slices, sliceCount, buffer);
}

// ---- Reductions ------------------------------------------------------------------------------

// a = inout, b = in: the CPU's Combine()(x, y) with x = inout.
struct SumOp {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
  __device__ double operator()(double a, double b) const { return __dadd_rn(a, b); }
};
struct ProdOp {
  __device__ float operator()(float a, float b) const { return __fmul_rn(a, b); }
  __device__ double operator()(double a, double b) const { return __dmul_rn(a, b); }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

template <typename T>
struct Vector16;
template <>
struct Vector16<float> {
  using Type = float4;
  static constexpr size_t kWidth = 4;
  template <typename Op>
  __device__ static float4 apply(Op op, float4 a, float4 b) {
    return make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
  }
};
template <>
struct Vector16<double> {
  using Type = double2;
  static constexpr size_t kWidth = 2;
  template <typename Op>
  __device__ static double2 apply(Op op, double2 a, double2 b) {
    return make_double2(op(a.x, b.x), op(a.y, b.y));
  }
};

template <typename T, typename Op>
__global__ void reduceKernel(const T* __restrict__ in, T* __restrict__ inout, size_t n, size_t head,
                             size_t vectors) {
  using V = Vector16<T>;
  using Vec = typename V::Type;
  const auto* in16 = reinterpret_cast<const Vec*>(in + head);
  auto* inout16 = reinterpret_cast<Vec*>(inout + head);
  const Op op{};
  forEachSplit<V::kWidth>(
      n, head, vectors, [&](size_t i) { inout[i] = op(inout[i], in[i]); },
      [&](size_t v) { inout16[v] = V::apply(op, inout16[v], in16[v]); });
}

template <typename T>
int reduceTyped(RedOp op, const void* in, void* inout, size_t n, cudaStream_t stream) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  const VectorSplit split = splitFor(b, sizeof(T), a, sizeof(T), n, Vector16<T>::kWidth);
  const unsigned blocks = blocksFor(threadsFor(split, n));
  switch (op) {
    case RedOp::kSum:
      return launch(reduceKernel<T, SumOp>, blocks, stream, a, b, n, split.head, split.vectors);
    case RedOp::kProd:
      return launch(reduceKernel<T, ProdOp>, blocks, stream, a, b, n, split.head, split.vectors);
    case RedOp::kMax:
      return launch(reduceKernel<T, MaxOp>, blocks, stream, a, b, n, split.head, split.vectors);
    case RedOp::kMin:
      return launch(reduceKernel<T, MinOp>, blocks, stream, a, b, n, split.head, split.vectors);
    default:
      return cudaErrorInvalidValue;
  }
}

__device__ __forceinline__ bool nonFinite(float value) {
  return (__float_as_uint(value) & 0x7f800000u) == 0x7f800000u;
}

__global__ void anyNonFiniteKernel(const float* __restrict__ data, size_t n, size_t head,
                                   size_t vectors, int* flag) {
  const auto* data4 = reinterpret_cast<const float4*>(data + head);
  bool found = false;
  forEachSplit<4>(
      n, head, vectors, [&](size_t i) { found |= nonFinite(data[i]); },
      [&](size_t v) {
        const float4 x = data4[v];
        found |= nonFinite(x.x) | nonFinite(x.y) | nonFinite(x.z) | nonFinite(x.w);
      });
  if (found) *flag = 1;  // every writer stores the same value: no atomic needed
}

}  // namespace

// ---- Launchers -------------------------------------------------------------------------------

int encodeHalfDevice(HalfFormat format, const float* in, float scale, uint16_t* out, size_t n,
                     void* stream) {
  if (n == 0) return cudaSuccess;
  const VectorSplit split = splitFor(out, sizeof(uint16_t), in, sizeof(float), n, kCodecWidth);
  const unsigned blocks = blocksFor(threadsFor(split, n));
  return format == HalfFormat::kFp16
             ? launch(encodeHalfKernel<HalfFormat::kFp16>, blocks, asStream(stream), in, scale, out,
                      n, split.head, split.vectors)
             : launch(encodeHalfKernel<HalfFormat::kBf16>, blocks, asStream(stream), in, scale, out,
                      n, split.head, split.vectors);
}

int decodeHalfDevice(HalfFormat format, const uint16_t* in, float scale, float* out, size_t n,
                     void* stream) {
  if (n == 0) return cudaSuccess;
  const VectorSplit split = splitFor(in, sizeof(uint16_t), out, sizeof(float), n, kCodecWidth);
  const unsigned blocks = blocksFor(threadsFor(split, n));
  const bool unit = scale == 1.0f;
  cudaStream_t s = asStream(stream);
  if (format == HalfFormat::kFp16) {
    return unit ? launch(decodeHalfKernel<HalfFormat::kFp16, false>, blocks, s, in, scale, out, n,
                         split.head, split.vectors)
                : launch(decodeHalfKernel<HalfFormat::kFp16, true>, blocks, s, in, scale, out, n,
                         split.head, split.vectors);
  }
  return unit ? launch(decodeHalfKernel<HalfFormat::kBf16, false>, blocks, s, in, scale, out, n,
                       split.head, split.vectors)
              : launch(decodeHalfKernel<HalfFormat::kBf16, true>, blocks, s, in, scale, out, n,
                       split.head, split.vectors);
}

int chunkL1NormsDevice(const float* data, size_t count, size_t chunkElements, float* norms,
                       void* stream) {
  if (chunkElements == 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t chunks = (count + chunkElements - 1) / chunkElements;
  return launch(chunkNormsKernel<false>, blocksFor(chunks * kNormLanes), asStream(stream),
                static_cast<float*>(nullptr), static_cast<const float*>(nullptr), data, count,
                chunkElements, chunks, norms);
}

int addAndChunkL1NormsDevice(float* residual, const float* send, size_t count, size_t chunkElements,
                             float* norms, void* stream) {
  if (chunkElements == 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t chunks = (count + chunkElements - 1) / chunkElements;
  return launch(chunkNormsKernel<true>, blocksFor(chunks * kNormLanes), asStream(stream), residual,
                send, static_cast<const float*>(residual), count, chunkElements, chunks, norms);
}

size_t selectTopChunksScratchBytes(size_t chunks) {
  if (chunks == 0 || chunks > UINT32_MAX) return 0;
  const auto n = static_cast<uint32_t>(chunks);
  size_t temp = 0;
  if (sortTempBytes(n, n, bitsFor(n - 1), &temp) != cudaSuccess) return 0;
  return selectArraysBytes(chunks) + alignUp(temp);
}

int selectTopChunksDevice(const float* norms, size_t chunks, size_t k, uint32_t* selected,
                          void* scratch, size_t scratchBytes, void* stream) {
  if (chunks > UINT32_MAX) return cudaErrorInvalidValue;
  k = std::min(k, chunks);
  if (k == 0) return cudaSuccess;
  const auto n = static_cast<uint32_t>(chunks);
  const auto top = static_cast<uint32_t>(k);
  cudaStream_t s = asStream(stream);
  if (k == chunks) return launch(iotaKernel, blocksFor(chunks), s, selected, n);

  const int indexBits = bitsFor(n - 1);
  size_t tempBytes = 0;
  cudaError_t status = sortTempBytes(n, top, indexBits, &tempBytes);
  if (status != cudaSuccess) return status;
  if (scratch == nullptr || scratchBytes < selectArraysBytes(chunks) + tempBytes) {
    return cudaErrorInvalidValue;
  }
  auto* base = static_cast<uint8_t*>(scratch);
  const size_t arrayBytes = alignUp(chunks * sizeof(uint32_t));
  auto* keysIn = reinterpret_cast<uint32_t*>(base);
  auto* keysOut = reinterpret_cast<uint32_t*>(base + arrayBytes);
  auto* indicesIn = reinterpret_cast<uint32_t*>(base + 2 * arrayBytes);
  auto* indicesOut = reinterpret_cast<uint32_t*>(base + 3 * arrayBytes);
  void* temp = base + 4 * arrayBytes;

  int launched = launch(importanceKeysKernel, blocksFor(chunks), s, norms, n, keysIn, indicesIn);
  if (launched != cudaSuccess) return launched;
  // Stable: equal keys keep ascending index order, which is the CPU's tie rule.
  status = cub::DeviceRadixSort::SortPairs(temp, tempBytes, static_cast<const uint32_t*>(keysIn),
                                           keysOut, static_cast<const uint32_t*>(indicesIn),
                                           indicesOut, n, 0, 32, s);
  if (status != cudaSuccess) return status;
  size_t keyTempBytes = tempBytes;
  return cub::DeviceRadixSort::SortKeys(
      temp, keyTempBytes, static_cast<const uint32_t*>(indicesOut), selected, top, 0, indexBits, s);
}

int cscGatherDevice(const float* data, size_t count, size_t chunkElements, const uint32_t* selected,
                    size_t k, uint64_t* packedOffsets, float* packed, void* stream) {
  if (chunkElements == 0) return cudaErrorInvalidValue;
  cudaStream_t s = asStream(stream);
  if (k == 0) {
    return static_cast<int>(cudaMemsetAsync(packedOffsets, 0, sizeof(uint64_t), s));
  }
  int status = launch(packedOffsetsKernel, blocksFor(k + 1), s, count, chunkElements, selected, k,
                      packedOffsets);
  if (status != cudaSuccess) return status;
  const bool vector = chunkElements % 4 == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(packed) % 16 == 0;
  const size_t width = vector ? 4 : 1;
  const size_t units = k * (chunkElements / width);
  const unsigned blocks = blocksFor(units);
  if (static_cast<uint64_t>(k) * chunkElements < UINT32_MAX) {
    const auto small = static_cast<uint32_t>(units);
    return vector ? launch(cscGatherKernel<4, uint32_t>, blocks, s, data, count, chunkElements,
                           selected, small, packed)
                  : launch(cscGatherKernel<1, uint32_t>, blocks, s, data, count, chunkElements,
                           selected, small, packed);
  }
  const auto large = static_cast<uint64_t>(units);
  return vector ? launch(cscGatherKernel<4, uint64_t>, blocks, s, data, count, chunkElements,
                         selected, large, packed)
                : launch(cscGatherKernel<1, uint64_t>, blocks, s, data, count, chunkElements,
                         selected, large, packed);
}

int cscScatterDevice(const float* summed, size_t count, size_t chunkElements,
                     const uint32_t* selected, size_t k, const uint64_t* packedOffsets, float* recv,
                     float* residual, void* stream) {
  (void)packedOffsets;  // selected chunk s starts at s * chunkElements (ascending lists)
  if (chunkElements == 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  cudaStream_t s = asStream(stream);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector = chunkElements % 4 == 0 && aligned(summed) && aligned(recv) &&
                      (residual == nullptr || aligned(residual));
  const size_t tileElements = size_t{kBlockThreads} * kScatterUnitsPerThread * (vector ? 4 : 1);
  const size_t tiles = (count + tileElements - 1) / tileElements;
  const auto blocks = static_cast<unsigned>(std::min(tiles, kMaxBlocks));
  if (count < UINT32_MAX) {
    return vector ? launch(cscScatterKernel<4, uint32_t>, blocks, s, summed, count, chunkElements,
                           selected, k, recv, residual)
                  : launch(cscScatterKernel<1, uint32_t>, blocks, s, summed, count, chunkElements,
                           selected, k, recv, residual);
  }
  return vector ? launch(cscScatterKernel<4, uint64_t>, blocks, s, summed, count, chunkElements,
                         selected, k, recv, residual)
                : launch(cscScatterKernel<1, uint64_t>, blocks, s, summed, count, chunkElements,
                         selected, k, recv, residual);
}

int fusionGatherDevice(const FusionSlice* slices, size_t sliceCount, void* packed, void* stream) {
  return fusionCopy(true, slices, sliceCount, packed, asStream(stream));
}

int fusionScatterDevice(const FusionSlice* slices, size_t sliceCount, const void* packed,
                        void* stream) {
  return fusionCopy(false, slices, sliceCount, packed, asStream(stream));
}

int reduceDevice(DType dtype, RedOp op, const void* in, void* inout, size_t n, void* stream) {
  const bool supportedOp =
      op == RedOp::kSum || op == RedOp::kProd || op == RedOp::kMax || op == RedOp::kMin;
  if (!supportedOp || (dtype != DType::kFloat32 && dtype != DType::kFloat64)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (dtype == DType::kFloat32) return reduceTyped<float>(op, in, inout, n, asStream(stream));
  return reduceTyped<double>(op, in, inout, n, asStream(stream));
}

int anyNonFiniteDevice(const float* data, size_t n, int* flag, void* stream) {
  if (n == 0) return cudaSuccess;
  const VectorSplit split = splitFor(data, sizeof(float), data, sizeof(float), n, 4);
  return launch(anyNonFiniteKernel, blocksFor(threadsFor(split, n)), asStream(stream), data, n,
                split.head, split.vectors, flag);
}

}  // namespace gfshim::cuda
