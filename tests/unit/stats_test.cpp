#include "engine/stats.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace gfshim {
namespace {

TEST(Stats, ReportShowsPathsReasonsAndBandwidth) {
  Stats stats;
  stats.record(Reason::kAutoRing, 1 << 20, 4, 1000000);  // 1 MiB in 1 ms on 4 ranks
  stats.record(Reason::kBelowMinBytes, 8, 0, 0);
  stats.record(Reason::kBelowMinBytes, 8, 0, 0);
  const StatsCounters counters = stats.snapshot();
  EXPECT_EQ(counters.calls[static_cast<int>(Reason::kAutoRing)], 1u);
  EXPECT_EQ(counters.busBytes[static_cast<int>(Reason::kAutoRing)], (1u << 20) * 6 / 4);
  const std::string report = formatStatsReport(counters, 1);
  EXPECT_NE(report.find("engine"), std::string::npos) << report;
  EXPECT_NE(report.find(reasonText(Reason::kBelowMinBytes)), std::string::npos) << report;
  EXPECT_NE(report.find("summary engine_calls=1 passthrough_calls=2"), std::string::npos) << report;
  // 1 MiB / 1 ms = 1.05 GB/s algbw, x 1.5 = 1.57 GB/s busbw.
  EXPECT_NE(report.find("1.05"), std::string::npos) << report;
  EXPECT_NE(report.find("1.57"), std::string::npos) << report;
}

// The fusion line says how often progress in calls blocked in the MPI, and only when it did.
TEST(Stats, FusionLineCountsBlockedWaitsOnlyWhenThereAreAny) {
  Stats stats;
  stats.record(Reason::kFused, 4096, 2, 1000);
  stats.recordFusion(1, 8, 8000000);
  const std::string polled = formatStatsReport(stats.snapshot(), 1);
  EXPECT_NE(polled.find("8 operations in 1 buckets"), std::string::npos) << polled;
  EXPECT_EQ(polled.find("blocked in the MPI"), std::string::npos) << polled;
  stats.recordFusionBlockedWait();
  stats.recordFusionBlockedWait();
  const std::string blocked = formatStatsReport(stats.snapshot(), 1);
  EXPECT_NE(blocked.find(", 2 times blocked in the MPI until a transfer completed (summed"),
            std::string::npos)
      << blocked;
}

}  // namespace
}  // namespace gfshim

namespace gfshim {
namespace {

// A thread that recorded into a Stats since destroyed records into the next one (often at the
// same address) without touching the freed block: each counts only its own calls.
TEST(Stats, ANewStatsAfterADestroyedOneCountsOnlyItsOwnCalls) {
  for (int round = 0; round < 3; ++round) {
    auto stats = std::make_unique<Stats>();
    stats->record(Reason::kAutoRing, 100, 2, 10);
    stats->record(Reason::kAutoRing, 100, 2, 10);
    EXPECT_EQ(stats->snapshot().calls[static_cast<int>(Reason::kAutoRing)], 2u) << round;
  }
}

TEST(Stats, CountsFromManyThreadsAddUp) {
  Stats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats] {
      for (int i = 0; i < 10000; ++i) stats.record(Reason::kBelowMinBytes, 3, 0, 0);
    });
  }
  for (std::thread& t : threads) t.join();
  const StatsCounters counters = stats.snapshot();
  EXPECT_EQ(counters.calls[static_cast<int>(Reason::kBelowMinBytes)], 40000u);
  EXPECT_EQ(counters.bytes[static_cast<int>(Reason::kBelowMinBytes)], 120000u);
}

}  // namespace
}  // namespace gfshim
