#include "engine/stats.h"

#include <algorithm>
#include <cstdio>

#include "common/static_tls.h"

namespace gfshim {
namespace {

std::string humanBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return text;
}

}  // namespace

struct Stats::ThreadBlock {
  std::atomic<uint64_t> calls[kReasonCount] = {};
  std::atomic<uint64_t> bytes[kReasonCount] = {};
  std::atomic<uint64_t> busBytes[kReasonCount] = {};
  std::atomic<uint64_t> nanos[kReasonCount] = {};
  std::atomic<uint64_t> fusion[kFusionCounterCount] = {};
  std::atomic<uint64_t> lossy[kLossyModeCount][kLossyCounterCount] = {};
  std::atomic<uint64_t> gpu[kGpuPathCount][2] = {};
  ThreadBlock* next = nullptr;
};

namespace {

// Single writer per block: a relaxed load and store compile to a plain add, and concurrent
// readers (snapshot) still see whole values.
void bump(std::atomic<uint64_t>& counter, uint64_t amount) {
  counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
}

}  // namespace

Stats::~Stats() {
  ThreadBlock* block = blocks_.load(std::memory_order_acquire);
  while (block != nullptr) {
    ThreadBlock* next = block->next;
    delete block;
    block = next;
  }
}

namespace {
// The block this thread last recorded into and the id of its Stats; the shim has one Stats
// object, tests several (destroyed ones too, whose blocks are freed).
thread_local Stats::ThreadBlock* tCachedBlock GFSHIM_STATIC_TLS = nullptr;
thread_local uint64_t tCachedOwnerId GFSHIM_STATIC_TLS = 0;
std::atomic<uint64_t> gNextStatsId{1};
}  // namespace

Stats::Stats() : id_(gNextStatsId.fetch_add(1, std::memory_order_relaxed)) {}

inline Stats::ThreadBlock* Stats::blockOfThisThread() {
  return tCachedOwnerId == id_ ? tCachedBlock : registerThisThread();
}

__attribute__((noinline)) Stats::ThreadBlock* Stats::registerThisThread() {
  auto* block = new ThreadBlock();
  block->next = blocks_.load(std::memory_order_relaxed);
  while (!blocks_.compare_exchange_weak(block->next, block, std::memory_order_release,
                                        std::memory_order_relaxed)) {
  }
  tCachedBlock = block;
  tCachedOwnerId = id_;
  return block;
}

void Stats::record(Reason reason, uint64_t bytes, int commSize, uint64_t nanos) {
  ThreadBlock* block = blockOfThisThread();
  const int i = static_cast<int>(reason);
  bump(block->calls[i], 1);
  bump(block->bytes[i], bytes);
  if (commSize > 1) {
    bump(block->busBytes[i],
         bytes * 2 * static_cast<uint64_t>(commSize - 1) / static_cast<uint64_t>(commSize));
  }
  if (nanos != 0) bump(block->nanos[i], nanos);
}

void Stats::recordFusionProgress(uint64_t nanos) {
  bump(blockOfThisThread()->fusion[kFusionProgressNanos], nanos);
}

void Stats::recordFusionBlockedWait() { bump(blockOfThisThread()->fusion[kFusionBlockedWaits], 1); }

void Stats::recordFusion(uint64_t rounds, uint64_t ops, uint64_t queuedNanos) {
  ThreadBlock* block = blockOfThisThread();
  bump(block->fusion[kFusionRounds], rounds);
  bump(block->fusion[kFusionOps], ops);
  bump(block->fusion[kFusionQueuedNanos], queuedNanos);
}

int lossyModeIndex(const LossyModes& modes) {
  const int codec = static_cast<int>(modes.codec);  // 0 none, 1 fp16, 2 bf16
  if (!modes.sparse) return codec == 0 ? -1 : codec - 1;
  return 2 + codec;
}

const char* lossyModeName(int index) {
  static const char* const kNames[kLossyModeCount] = {"fp16", "bf16", "csc", "csc+fp16",
                                                      "csc+bf16"};
  return index >= 0 && index < kLossyModeCount ? kNames[index] : "exact";
}

void Stats::recordLossy(const LossyRecord& record) {
  const int mode = lossyModeIndex(record.modes);
  if (mode < 0) return;
  auto& counters = blockOfThisThread()->lossy[mode];
  const uint64_t p = static_cast<uint64_t>(record.commSize);
  bump(counters[kLossyCalls], 1);
  bump(counters[kLossyBytesIn], record.bytesIn);
  bump(counters[kLossyWireBytes], record.wireBytes);
  if (p > 1) bump(counters[kLossyExactWire], record.bytesIn * 2 * (p - 1) / p);
  if (record.redone) bump(counters[kLossyRedos], 1);
  bump(counters[kLossySparseElements], record.sparseElements);
  bump(counters[kLossySentElements], record.sentElements);
  bump(counters[kLossyMomentumElements], record.momentumElements);
  bump(counters[kLossyClippedElements], record.clippedElements);
  if (record.shadowed) {
    const auto error = static_cast<uint64_t>(std::min(record.shadowError, 1e6) * 1e12);
    bump(counters[kLossyShadowCalls], 1);
    bump(counters[kLossyShadowErrorSum], error);
    if (error > counters[kLossyShadowErrorMax].load(std::memory_order_relaxed)) {
      counters[kLossyShadowErrorMax].store(error, std::memory_order_relaxed);
    }
  }
}

const char* gpuPathName(int path) {
  static const char* const kNames[kGpuPathCount] = {
      "NCCL", "staged, host algorithm", "staged around the MPI call", "fused, packed from GPU",
      "GPU pointer passed to the MPI"};
  return path >= 0 && path < kGpuPathCount ? kNames[path] : "?";
}

void Stats::recordGpu(GpuPathCounter path, uint64_t bytes) {
  auto& counters = blockOfThisThread()->gpu[path];
  bump(counters[0], 1);
  bump(counters[1], bytes);
}

StatsCounters Stats::snapshot() const {
  StatsCounters out;
  for (ThreadBlock* block = blocks_.load(std::memory_order_acquire); block != nullptr;
       block = block->next) {
    for (int i = 0; i < kReasonCount; ++i) {
      out.calls[i] += block->calls[i].load(std::memory_order_relaxed);
      out.bytes[i] += block->bytes[i].load(std::memory_order_relaxed);
      out.busBytes[i] += block->busBytes[i].load(std::memory_order_relaxed);
      out.nanos[i] += block->nanos[i].load(std::memory_order_relaxed);
    }
    for (int i = 0; i < kFusionCounterCount; ++i) {
      out.fusion[i] += block->fusion[i].load(std::memory_order_relaxed);
    }
    for (int m = 0; m < kLossyModeCount; ++m) {
      for (int c = 0; c < kLossyCounterCount; ++c) {
        const uint64_t value = block->lossy[m][c].load(std::memory_order_relaxed);
        out.lossy[m][c] =
            c == kLossyShadowErrorMax ? std::max(out.lossy[m][c], value) : out.lossy[m][c] + value;
      }
    }
    for (int g = 0; g < kGpuPathCount; ++g) {
      for (int c = 0; c < 2; ++c) out.gpu[g][c] += block->gpu[g][c].load(std::memory_order_relaxed);
    }
  }
  return out;
}

std::string formatStatsReport(const StatsCounters& summed, int ranks) {
  std::string report;
  char line[512];
  std::snprintf(line, sizeof(line),
                "GFSHIM STATS over %d ranks: calls and bytes summed over ranks; time is the "
                "slowest rank's; bandwidth per rank as nccl-tests\n",
                ranks);
  report += line;
  std::snprintf(line, sizeof(line), "GFSHIM STATS %-12s %-60s %10s %12s %10s %12s %12s\n", "path",
                "reason", "calls", "bytes", "time(s)", "algbw(GB/s)", "busbw(GB/s)");
  report += line;
  uint64_t engineCalls = 0, passthroughCalls = 0;
  for (int i = 0; i < kReasonCount; ++i) {
    if (summed.calls[i] == 0) continue;
    const Reason reason = static_cast<Reason>(i);
    const bool engine = isEngineReason(reason);
    (engine ? engineCalls : passthroughCalls) += summed.calls[i];
    const double seconds = static_cast<double>(summed.nanos[i]) * 1e-9;
    if (engine && seconds > 0) {
      const double perRank = 1.0 / static_cast<double>(ranks);
      std::snprintf(line, sizeof(line),
                    "GFSHIM STATS %-12s %-60s %10llu %12s %10.3f %12.2f %12.2f\n", "engine",
                    reasonText(reason), static_cast<unsigned long long>(summed.calls[i]),
                    humanBytes(static_cast<double>(summed.bytes[i])).c_str(), seconds,
                    static_cast<double>(summed.bytes[i]) * perRank / seconds * 1e-9,
                    static_cast<double>(summed.busBytes[i]) * perRank / seconds * 1e-9);
    } else {
      std::snprintf(line, sizeof(line), "GFSHIM STATS %-12s %-60s %10llu %12s %10s %12s %12s\n",
                    engine ? "engine" : "passthrough", reasonText(reason),
                    static_cast<unsigned long long>(summed.calls[i]),
                    humanBytes(static_cast<double>(summed.bytes[i])).c_str(), "-", "-", "-");
    }
    report += line;
  }
  const uint64_t fusedOps = summed.fusion[kFusionOps];
  if (fusedOps > 0) {
    const uint64_t buckets = summed.calls[static_cast<int>(Reason::kFused)];
    std::string blocked;
    if (summed.fusion[kFusionBlockedWaits] > 0) {
      blocked = ", " + std::to_string(summed.fusion[kFusionBlockedWaits]) +
                " times blocked in the MPI until a transfer completed";
    }
    std::snprintf(line, sizeof(line),
                  "GFSHIM STATS fusion       %llu operations in %llu buckets (%.1f per bucket), "
                  "%llu negotiation rounds, %.3f ms mean time from MPI_Iallreduce to completion, "
                  "%.1f ms in the shim's progress%s (summed over ranks)\n",
                  static_cast<unsigned long long>(fusedOps),
                  static_cast<unsigned long long>(buckets),
                  buckets > 0 ? static_cast<double>(fusedOps) / static_cast<double>(buckets) : 0.0,
                  static_cast<unsigned long long>(summed.fusion[kFusionRounds]),
                  static_cast<double>(summed.fusion[kFusionQueuedNanos]) * 1e-6 /
                      static_cast<double>(fusedOps),
                  static_cast<double>(summed.fusion[kFusionProgressNanos]) * 1e-6, blocked.c_str());
    report += line;
  }
  for (int m = 0; m < kLossyModeCount; ++m) {
    const uint64_t* c = summed.lossy[m];
    if (c[kLossyCalls] == 0) continue;
    std::string sparse, shadow;
    if (c[kLossySparseElements] > 0) {
      std::snprintf(line, sizeof(line), ", density achieved %.4f",
                    static_cast<double>(c[kLossySentElements]) /
                        static_cast<double>(c[kLossySparseElements]));
      sparse = line;
    }
    const auto shareOfInput = [&](LossyCounter counter) {
      return static_cast<double>(c[counter]) * sizeof(float) / static_cast<double>(c[kLossyBytesIn]);
    };
    if (c[kLossyMomentumElements] > 0) {
      std::snprintf(line, sizeof(line), ", momentum-corrected %.0f %% of elements",
                    100 * shareOfInput(kLossyMomentumElements));
      sparse += line;
    }
    if (c[kLossyClippedElements] > 0) {
      std::snprintf(line, sizeof(line), ", clipped %.0f %% of elements",
                    100 * shareOfInput(kLossyClippedElements));
      sparse += line;
    }
    if (c[kLossyShadowCalls] > 0) {
      // Identical on every rank: the sums over ranks hold each value `ranks` times.
      const double shadowCalls = static_cast<double>(c[kLossyShadowCalls]) / ranks;
      std::snprintf(line, sizeof(line),
                    ", shadow: %.0f calls, relative L2 error mean %.3g max %.3g", shadowCalls,
                    static_cast<double>(c[kLossyShadowErrorSum]) * 1e-12 / ranks / shadowCalls,
                    static_cast<double>(c[kLossyShadowErrorMax]) * 1e-12);
      shadow = line;
    }
    std::snprintf(line, sizeof(line),
                  "GFSHIM STATS lossy %-8s %llu calls, %s in, %s on the wire (exact ring: %s, "
                  "%.2fx less), %llu overflow redos%s%s\n",
                  lossyModeName(m), static_cast<unsigned long long>(c[kLossyCalls]),
                  humanBytes(static_cast<double>(c[kLossyBytesIn])).c_str(),
                  humanBytes(static_cast<double>(c[kLossyWireBytes])).c_str(),
                  humanBytes(static_cast<double>(c[kLossyExactWire])).c_str(),
                  c[kLossyWireBytes] > 0 ? static_cast<double>(c[kLossyExactWire]) /
                                               static_cast<double>(c[kLossyWireBytes])
                                         : 0.0,
                  static_cast<unsigned long long>(c[kLossyRedos]), sparse.c_str(), shadow.c_str());
    report += line;
  }
  for (int g = 0; g < kGpuPathCount; ++g) {
    if (summed.gpu[g][0] == 0) continue;
    std::snprintf(line, sizeof(line), "GFSHIM STATS gpu %-30s %10llu calls %12s\n", gpuPathName(g),
                  static_cast<unsigned long long>(summed.gpu[g][0]),
                  humanBytes(static_cast<double>(summed.gpu[g][1])).c_str());
    report += line;
  }
  std::snprintf(line, sizeof(line),
                "GFSHIM STATS summary engine_calls=%llu passthrough_calls=%llu\n",
                static_cast<unsigned long long>(engineCalls),
                static_cast<unsigned long long>(passthroughCalls));
  report += line;
  return report;
}

}  // namespace gfshim
