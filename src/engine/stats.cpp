#include "engine/stats.h"

#include <cstdio>

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
  std::atomic<uint64_t> fusion[3] = {};
  const Stats* owner = nullptr;
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
// The block this thread last recorded into; the shim has one Stats object, tests several.
thread_local Stats::ThreadBlock* tCachedBlock __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace

inline Stats::ThreadBlock* Stats::blockOfThisThread() {
  ThreadBlock* cached = tCachedBlock;
  return cached != nullptr && cached->owner == this ? cached : registerThisThread();
}

__attribute__((noinline)) Stats::ThreadBlock* Stats::registerThisThread() {
  auto* block = new ThreadBlock();
  block->owner = this;
  block->next = blocks_.load(std::memory_order_relaxed);
  while (!blocks_.compare_exchange_weak(block->next, block, std::memory_order_release,
                                        std::memory_order_relaxed)) {
  }
  tCachedBlock = block;
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

void Stats::recordFusion(uint64_t rounds, uint64_t ops, uint64_t queuedNanos) {
  ThreadBlock* block = blockOfThisThread();
  bump(block->fusion[kFusionRounds], rounds);
  bump(block->fusion[kFusionOps], ops);
  bump(block->fusion[kFusionQueuedNanos], queuedNanos);
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
    for (int i = 0; i < 3; ++i) out.fusion[i] += block->fusion[i].load(std::memory_order_relaxed);
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
    std::snprintf(line, sizeof(line),
                  "GFSHIM STATS fusion       %llu operations in %llu buckets (%.1f per bucket), "
                  "%llu negotiation rounds, %.3f ms mean time from MPI_Iallreduce to completion\n",
                  static_cast<unsigned long long>(fusedOps),
                  static_cast<unsigned long long>(buckets),
                  buckets > 0 ? static_cast<double>(fusedOps) / static_cast<double>(buckets) : 0.0,
                  static_cast<unsigned long long>(summed.fusion[kFusionRounds]),
                  static_cast<double>(summed.fusion[kFusionQueuedNanos]) * 1e-6 /
                      static_cast<double>(fusedOps));
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
