// gpu_kernel_bench: device throughput of the CUDA kernels (cuda/gpu_kernels.h) against a
// device-to-device cudaMemcpyAsync that moves the same bytes. No MPI, no gtest.
//
// For each size N (fp32 elements; default 1M 16M 64M) every kernel runs 3 warm-up and 20 timed
// repetitions on one stream (cudaEvent around each), and the table shows the median:
//
//   kernel        what it moves (bytes read + written)
//   encode fp16   4N + 2N            decode fp16  2N + 4N       (bf16 the same)
//   norms         4N                 add+norms    8N + 4N       (4096-element chunks)
//   select top 1% 4 * chunks         latency-bound: the ratio says little
//   gather 10%    2 * 4 * packed     scatter 10%  4 * packed + 4N + 4 * packed (residual)
//   fusion gather 2 * 4N over 161 slices of mixed sizes, 256-byte aligned (scatter the same)
//   reduce sum    8N + 4N            nonfinite    4N
//
// GB/s counts those bytes; "x copy" is the kernel's GB/s over the copy's for the same byte count
// (the copy moves bytes/2 one way, so bytes in total). The goal is >= 0.8 for the codec and the
// gathers/scatters. Total run time on an H200 is a few seconds.
//
// Exit status: 0 after printing the table; 77 (the automake "skipped" code, so scripts can tell)
// with one line "gpu_kernel_bench: no CUDA device (...)" where there is none; 1 on a CUDA error.
//
// Usage: gpu_kernel_bench [N ...]   (suffixes K and M)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda/gpu_kernels.h"

namespace {

using namespace gfshim;
using namespace gfshim::cuda;

constexpr int kWarmups = 3;
constexpr int kRepetitions = 20;
constexpr size_t kChunkElements = 4096;

void check(int status, const char* what) {
  if (status != 0) {
    std::fprintf(stderr, "gpu_kernel_bench: %s failed: %s\n", what,
                 cudaGetErrorString(static_cast<cudaError_t>(status)));
    std::exit(1);
  }
}

// Gradient-like values in (-1, 1) from a hash of the index: every kernel sees normal numbers.
__global__ void fillKernel(float* data, size_t n, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    data[i] = (static_cast<float>(h >> 8) / 8388608.0f - 1.0f);
  }
}

template <typename T>
T* deviceAlloc(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

class Timer {
 public:
  explicit Timer(cudaStream_t stream) : stream_(stream) {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Median milliseconds of `run` (which enqueues on the stream).
  template <typename Fn>
  double medianMs(Fn&& run) {
    for (int i = 0; i < kWarmups; ++i) run();
    std::vector<float> times;
    for (int i = 0; i < kRepetitions; ++i) {
      check(cudaEventRecord(start_, stream_), "cudaEventRecord");
      run();
      check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
      check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return (times[kRepetitions / 2 - 1] + times[kRepetitions / 2]) / 2.0;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_;
  cudaEvent_t stop_;
};

size_t parseCount(const char* text) {
  char* end = nullptr;
  size_t value = std::strtoull(text, &end, 10);
  if (*end == 'K' || *end == 'k') value <<= 10;
  if (*end == 'M' || *end == 'm') value <<= 20;
  return value;
}

struct Buffers {
  float* a;         // N floats: kernel input
  float* b;         // N floats: second input / residual
  float* c;         // N floats: output
  uint16_t* codes;  // N codes
  uint8_t* copy;    // 2 * 4N bytes for the copy baseline
  float* norms;
  uint32_t* selected;
  uint64_t* offsets;
  void* scratch;
  size_t scratchBytes;
  FusionSlice* slices;
  int* flag;
};

void runSize(size_t n, cudaStream_t stream, Timer& timer) {
  const size_t chunks = (n + kChunkElements - 1) / kChunkElements;
  Buffers buf{};
  buf.a = deviceAlloc<float>(n);
  buf.b = deviceAlloc<float>(n);
  buf.c = deviceAlloc<float>(n);
  buf.codes = deviceAlloc<uint16_t>(n);
  buf.copy = deviceAlloc<uint8_t>(3 * n * sizeof(float));
  buf.norms = deviceAlloc<float>(chunks);
  buf.selected = deviceAlloc<uint32_t>(2 * chunks + 2);  // the 10% list, then the 1% one
  buf.offsets = deviceAlloc<uint64_t>(chunks + 1);
  buf.scratchBytes = selectTopChunksScratchBytes(chunks);
  buf.scratch = deviceAlloc<uint8_t>(buf.scratchBytes);
  buf.flag = deviceAlloc<int>(1);
  fillKernel<<<1024, 256, 0, stream>>>(buf.a, n, 1);
  fillKernel<<<1024, 256, 0, stream>>>(buf.b, n, 2);
  check(cudaGetLastError(), "fillKernel");

  // 161 slices of mixed sizes (a few large, many small), 256-byte aligned in both places, adding
  // up to about 4N bytes: tensors in `a`, packed in `c`.
  std::vector<FusionSlice> slices;
  {
    const size_t total = n * sizeof(float);
    std::vector<double> weights;
    for (int t = 0; t < 161; ++t) weights.push_back(t % 20 == 0 ? 400.0 : 1.0 + (t * 37 % 11));
    double sum = 0;
    for (double w : weights) sum += w;
    uint64_t tensorAt = 0;
    uint64_t packedAt = 0;
    for (double w : weights) {
      uint64_t bytes = static_cast<uint64_t>(w / sum * static_cast<double>(total) * 0.98);
      bytes = std::max<uint64_t>(bytes, 4);
      if (tensorAt + bytes > total || packedAt + bytes > total) break;
      slices.push_back(FusionSlice{reinterpret_cast<uint8_t*>(buf.a) + tensorAt, packedAt, bytes});
      tensorAt = (tensorAt + bytes + 255) / 256 * 256;
      packedAt = (packedAt + bytes + 255) / 256 * 256;
    }
    buf.slices = deviceAlloc<FusionSlice>(slices.size());
    check(cudaMemcpy(buf.slices, slices.data(), slices.size() * sizeof(FusionSlice),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  uint64_t fusionBytes = 0;
  for (const FusionSlice& s : slices) fusionBytes += s.bytes;

  // Selections: top 1% for the select timing, a fixed 10% (every 10th chunk) for gather/scatter.
  const size_t selectK = std::max<size_t>(1, chunks / 100);
  const size_t packK = std::max<size_t>(1, chunks / 10);
  {
    std::vector<uint32_t> every10th(packK);
    for (size_t s = 0; s < packK; ++s) every10th[s] = static_cast<uint32_t>(s * (chunks / packK));
    check(cudaMemcpy(buf.selected, every10th.data(), packK * sizeof(uint32_t),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  const double packedBytes = 4.0 * static_cast<double>(std::min(n, packK * kChunkElements));
  check(chunkL1NormsDevice(buf.a, n, kChunkElements, buf.norms, stream), "norms");
  check(cudaStreamSynchronize(stream), "sync");

  const double f = static_cast<double>(n);
  struct Case {
    const char* name;
    double bytes;
    std::function<void()> run;
  };
  void* s = stream;
  std::vector<Case> cases = {
      {"encode fp16", 6 * f,
       [&] { check(encodeHalfDevice(HalfFormat::kFp16, buf.a, 1.0f, buf.codes, n, s), "encode"); }},
      {"decode fp16", 6 * f,
       [&] { check(decodeHalfDevice(HalfFormat::kFp16, buf.codes, 1.0f, buf.c, n, s), "decode"); }},
      {"encode bf16", 6 * f,
       [&] { check(encodeHalfDevice(HalfFormat::kBf16, buf.a, 1.0f, buf.codes, n, s), "encode"); }},
      {"decode bf16", 6 * f,
       [&] { check(decodeHalfDevice(HalfFormat::kBf16, buf.codes, 1.0f, buf.c, n, s), "decode"); }},
      {"norms 4096", 4 * f,
       [&] { check(chunkL1NormsDevice(buf.a, n, kChunkElements, buf.norms, s), "norms"); }},
      {"add+norms 4096", 12 * f,
       [&] {
         check(addAndChunkL1NormsDevice(buf.b, buf.a, n, kChunkElements, buf.norms, s), "norms");
       }},
      {"select top 1%", 4.0 * static_cast<double>(chunks),
       [&] {
         check(selectTopChunksDevice(buf.norms, chunks, selectK, buf.selected + packK, buf.scratch,
                                     buf.scratchBytes, s),
               "select");
       }},
      {"gather 10%", 2 * packedBytes,
       [&] {
         check(
             cscGatherDevice(buf.a, n, kChunkElements, buf.selected, packK, buf.offsets, buf.c, s),
             "gather");
       }},
      {"scatter 10%", 2 * packedBytes + 4 * f,
       [&] {
         check(cscScatterDevice(buf.c, n, kChunkElements, buf.selected, packK, buf.offsets, buf.b,
                                reinterpret_cast<float*>(buf.copy), s),
               "scatter");
       }},
      {"fusion gather", 2.0 * static_cast<double>(fusionBytes),
       [&] { check(fusionGatherDevice(buf.slices, slices.size(), buf.c, s), "fusion gather"); }},
      {"fusion scatter", 2.0 * static_cast<double>(fusionBytes),
       [&] { check(fusionScatterDevice(buf.slices, slices.size(), buf.c, s), "fusion scatter"); }},
      {"reduce sum f32", 12 * f,
       [&] { check(reduceDevice(DType::kFloat32, RedOp::kSum, buf.a, buf.b, n, s), "reduce"); }},
      {"nonfinite", 4 * f, [&] { check(anyNonFiniteDevice(buf.a, n, buf.flag, s), "nonfinite"); }},
  };

  for (const Case& c : cases) {
    const double ms = timer.medianMs(c.run);
    const auto copyBytes = static_cast<size_t>(c.bytes / 2);
    const double copyMs = timer.medianMs([&] {
      check(cudaMemcpyAsync(buf.copy + copyBytes, buf.copy, copyBytes, cudaMemcpyDeviceToDevice,
                            stream),
            "cudaMemcpyAsync");
    });
    const double gbps = c.bytes / (ms * 1e6);
    const double copyGbps = c.bytes / (copyMs * 1e6);
    std::printf("%-16s %10zu %9.4f %9.1f %9.1f %7.2f\n", c.name, n, ms, gbps, copyGbps,
                gbps / copyGbps);
  }
  std::fflush(stdout);

  cudaFree(buf.a);
  cudaFree(buf.b);
  cudaFree(buf.c);
  cudaFree(buf.codes);
  cudaFree(buf.copy);
  cudaFree(buf.norms);
  cudaFree(buf.selected);
  cudaFree(buf.offsets);
  cudaFree(buf.scratch);
  cudaFree(buf.slices);
  cudaFree(buf.flag);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices <= 0) {
    std::printf("gpu_kernel_bench: no CUDA device (cudaGetDeviceCount: %s)\n",
                status != cudaSuccess ? cudaGetErrorName(status) : "0 devices");
    return 77;
  }
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(parseCount(argv[i]));
  if (sizes.empty()) sizes = {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20};

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("gpu_kernel_bench on %s (%d SMs); median of %d after %d warm-ups\n", prop.name,
              prop.multiProcessorCount, kRepetitions, kWarmups);
  std::printf("%-16s %10s %9s %9s %9s %7s\n", "kernel", "elements", "ms", "GB/s", "copy GB/s",
              "x copy");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  {
    Timer timer(stream);
    for (size_t n : sizes) {
      if (n == 0) continue;
      runSize(n, stream, timer);
    }
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}
