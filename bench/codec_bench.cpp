// codec_bench: throughput of the per-element kernels of a ring hop against memcpy of the same fp32
// data, on every implementation path: the fp16/bf16 wire codec (src/compress/half_codec) and the
// exact reduction (src/algo/reducer, float SUM). No MPI.
//
// For each size N (floats) it times, best of several repetitions on buffers already touched:
//   memcpy      4N bytes fp32 -> fp32
//   encode      N fp32 -> N 16-bit (read 4N, write 2N bytes)
//   decode      N 16-bit -> N fp32 (read 2N, write 4N)
//   decodeAdd   N 16-bit + N fp32 -> N fp32 (read 6N, write 4N): the reduce-scatter hop
//   reduce      N fp32 + N fp32 -> N fp32 (read 8N, write 4N): the exact reduce-scatter hop
// and prints ms, GB/s of the 4N fp32 bytes the call converts, and memcpy time / call time (so
// 0.8 means the codec runs at 0.8x memcpy speed).
//
// Usage: codec_bench [N ...]   (default 1M 16M 64M; suffixes K and M)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algo/reducer.h"
#include "compress/half_codec.h"

namespace {

using gfshim::HalfCodecPath;
using gfshim::HalfFormat;

template <typename Fn>
double bestSeconds(int repetitions, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto end = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(end - start).count());
  }
  return best;
}

size_t parseCount(const char* text) {
  char* end = nullptr;
  size_t n = std::strtoull(text, &end, 10);
  if (*end == 'K' || *end == 'k') n <<= 10;
  if (*end == 'M' || *end == 'm') n <<= 20;
  return n;
}

std::string countName(size_t n) {
  if (n % (1u << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % (1u << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

void benchSize(size_t n) {
  std::vector<float> input(n), local(n), output(n), copy(n);
  std::vector<uint16_t> wire(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    input[i] = value(rng);
    local[i] = value(rng);
  }
  std::memset(output.data(), 0, n * sizeof(float));
  std::memset(copy.data(), 0, n * sizeof(float));
  const int repetitions = n <= (size_t{1} << 20) ? 20 : (n <= (size_t{16} << 20) ? 7 : 4);
  const double fp32Bytes = static_cast<double>(n) * sizeof(float);

  const double memcpySeconds =
      bestSeconds(repetitions, [&] { std::memcpy(copy.data(), input.data(), n * sizeof(float)); });
  auto row = [&](const char* op, const char* path, double seconds) {
    std::printf("%6s  %-16s %-9s %9.3f %9.2f %9.2f\n", countName(n).c_str(), op, path,
                seconds * 1e3, fp32Bytes / seconds / 1e9, memcpySeconds / seconds);
  };
  row("memcpy", "-", memcpySeconds);
  for (HalfFormat format : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (HalfCodecPath path : {HalfCodecPath::kSimd, HalfCodecPath::kScalar}) {
      const char* pathName = path == HalfCodecPath::kScalar     ? "scalar"
                             : gfshim::halfCodecSimdAvailable() ? "f16c+avx2"
                                                                : "scalar*";
      const std::string f = gfshim::halfFormatName(format);
      encodeHalf(path, format, input.data(), 1.0f, wire.data(), n);
      row(("encode " + f).c_str(), pathName, bestSeconds(repetitions, [&] {
            encodeHalf(path, format, input.data(), 1.0f, wire.data(), n);
          }));
      row(("decode " + f).c_str(), pathName, bestSeconds(repetitions, [&] {
            decodeHalf(path, format, wire.data(), output.data(), n);
          }));
      row(("decodeAdd " + f).c_str(), pathName, bestSeconds(repetitions, [&] {
            decodeAdd(path, format, wire.data(), local.data(), 0.5f, output.data(), n);
          }));
    }
  }
  for (gfshim::ReducePath path : {gfshim::ReducePath::kAvx2, gfshim::ReducePath::kPortable}) {
    const gfshim::ReduceFn sum =
        gfshim::cpuReduceFn(gfshim::DType::kFloat32, gfshim::RedOp::kSum, path);
    const bool avx2 = std::string(gfshim::reduceImplementation()) == "avx2";
    const char* pathName = path == gfshim::ReducePath::kPortable ? "portable"
                           : avx2                                ? "avx2"
                                                                 : "portable*";
    row("reduce sum f32", pathName,
        bestSeconds(repetitions, [&] { sum(input.data(), local.data(), output.data(), n); }));
  }
  // Keep the results observable so nothing is optimized away.
  volatile float sink = output[n / 2] + copy[n / 3];
  (void)sink;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(parseCount(argv[i]));
  if (counts.empty()) counts = {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20};
  std::printf("# codec_bench: codec %s, reduction %s; GB/s counts the 4N fp32 bytes of the call;\n",
              gfshim::halfCodecImplementation(), gfshim::reduceImplementation());
  std::printf("# x memcpy = memcpy time / call time (1.0 = as fast as copying the fp32 data)\n");
  std::printf("%6s  %-16s %-9s %9s %9s %9s\n", "N", "operation", "path", "ms", "GB/s", "x memcpy");
  for (size_t n : counts) {
    if (n == 0) continue;
    benchSize(n);
  }
  return 0;
}
