// csc_bench: the local work of one CSC call against a memcpy of the same buffer, on one core,
// no MPI.
//
// For each N and density it times, best of R repetitions:
//   memcpy      copying 4N bytes (the floor for anything that touches the whole buffer once)
//   add+norms   residual += send and the chunk L1 norms, one fused pass over N elements
//   select      top k = ceil(density * chunks) chunks (nth_element over the norm vector)
//   pack        gathering the selected chunks into the send buffer of the dense allreduce
//   csc         add+norms + select + pack: the work before anything goes on the wire
//   ratio       memcpy / csc (1.0: CSC's local work costs one copy; target >= 0.5)
//   unpack      after the wire: recv gets the selected chunks and zeros, the residual of the
//               selected chunks is cleared (reported, not in the ratio)
//
// The add+norms pass reads send and the residual and writes the residual: 12N bytes of traffic
// against memcpy's 8N (plus the write-allocate of the destination), so ~0.7-1.0 is what a
// memory-bound pass can reach. Usage: csc_bench [repetitions] [chunkElements]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compress/csc.h"

namespace {

using Clock = std::chrono::steady_clock;

double millisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Gradient-like data: small values, a scale that varies per 4096-element block so the norms
// differ, cheap to generate.
void fill(std::vector<float>& data, uint32_t seed) {
  uint32_t state = seed;
  for (size_t i = 0; i < data.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) * (1.0f / 16777216.0f) - 0.5f;
    data[i] = unit * static_cast<float>(1 + (i / 4096 * 2654435761u >> 7) % 64) * 1e-3f;
  }
}

struct Row {
  double memcpyMs = 1e30, addNormsMs = 1e30, selectMs = 1e30, packMs = 1e30, cscMs = 1e30,
         unpackMs = 1e30;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const size_t chunkElements = argc > 2 ? static_cast<size_t>(std::max(1L, std::atol(argv[2])))
                                        : gfshim::kCscDefaultChunkElements;
  std::printf("csc_bench: best of %d, chunk %zu elements, one core\n", reps, chunkElements);
  std::printf("%10s %7s %7s %6s %10s %10s %9s %8s %9s %7s %10s\n", "N", "density", "chunks", "k",
              "memcpy_ms", "addnorm_ms", "select_ms", "pack_ms", "csc_ms", "ratio", "unpack_ms");
  double sink = 0;
  for (size_t n : {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20}) {
    std::vector<float> send(n), residual(n), copy(n);
    fill(send, 1);
    const size_t chunks = gfshim::cscChunkCount(n, chunkElements);
    std::vector<float> norms(chunks);
    std::vector<uint32_t> selected;
    selected.reserve(chunks);
    for (double density : {0.1, 0.01}) {
      const size_t k = gfshim::cscSelectedCount(chunks, density);
      std::vector<float> packed(std::min(n, k * chunkElements));
      std::fill(residual.begin(), residual.end(), 0.0f);
      Row best;
      for (int r = 0; r < reps; ++r) {
        Clock::time_point start = Clock::now();
        std::memcpy(copy.data(), send.data(), n * sizeof(float));
        best.memcpyMs = std::min(best.memcpyMs, millisSince(start));

        start = Clock::now();
        gfshim::addAndChunkL1Norms(residual.data(), send.data(), n, chunkElements, norms.data());
        const double addNorms = millisSince(start);
        Clock::time_point step = Clock::now();
        gfshim::selectTopChunks(norms.data(), chunks, k, &selected);
        const double select = millisSince(step);
        step = Clock::now();
        gfshim::cscPack(residual.data(), n, chunkElements, selected.data(), k, packed.data());
        const double pack = millisSince(step);
        best.cscMs = std::min(best.cscMs, millisSince(start));
        best.addNormsMs = std::min(best.addNormsMs, addNorms);
        best.selectMs = std::min(best.selectMs, select);
        best.packMs = std::min(best.packMs, pack);

        start = Clock::now();
        gfshim::cscUnpack(packed.data(), n, chunkElements, selected.data(), k, copy.data());
        gfshim::cscClearChunks(residual.data(), n, chunkElements, selected.data(), k);
        best.unpackMs = std::min(best.unpackMs, millisSince(start));
        sink += copy[n / 3] + packed[0];
      }
      std::printf("%9zuM %7.2f %7zu %6zu %10.3f %10.3f %9.3f %8.3f %9.3f %7.2f %10.3f\n", n >> 20,
                  density, chunks, k, best.memcpyMs, best.addNormsMs, best.selectMs, best.packMs,
                  best.cscMs, best.memcpyMs / best.cscMs, best.unpackMs);
    }
  }
  std::printf("(checksum %g)\n", sink);
  return 0;
}
