// Threads as ranks over the fake transport, shared by the threads-as-ranks tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "engine/policy.h"
#include "fake/fake_transport.h"

namespace gfshim {

// An engine plan of `algo` as the policy would hand it to executePlan.
inline Plan enginePlan(Algo algo, Reason reason, uint64_t segmentBytes) {
  Plan plan;
  plan.route = Route::kEngine;
  plan.algo = algo;
  plan.reason = reason;
  plan.segmentBytes = segmentBytes;
  return plan;
}

// Runs `body(rank, transport)` on one thread per rank of `fabric`; returns each rank's Status.
inline std::vector<Status> runRanks(FakeFabric& fabric,
                                    const std::function<Status(int, Transport&)>& body) {
  std::vector<Status> results(static_cast<size_t>(fabric.ranks()));
  std::vector<std::thread> threads;
  for (int r = 0; r < fabric.ranks(); ++r) {
    threads.emplace_back([&, r] {
      FakeTransport transport(fabric, r);
      results[static_cast<size_t>(r)] = body(r, transport);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Every rank's status is ok, rank 0 holds the exact float sum of `contribution(rank, i)` over
// ranks (integer-valued data, so any order sums exactly), and every rank holds rank 0's bits.
inline void expectExactSumOnEveryRank(const std::vector<Status>& statuses,
                                      const std::vector<std::vector<float>>& results, size_t count,
                                      const std::function<float(int, size_t)>& contribution) {
  const int p = static_cast<int>(results.size());
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < p; ++r) expected += contribution(r, i);
    ASSERT_EQ(results[0][i], expected) << "element " << i;
  }
  for (int r = 1; r < p && count > 0; ++r) {
    ASSERT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(),
                          count * sizeof(float)),
              0)
        << "rank " << r << " differs from rank 0";
  }
}

// `ranks` buffers of `count` inexact floats (long fractions, different on every rank), where a
// rank that reduced in another order than the others would differ in the last bits.
inline std::vector<std::vector<float>> inexactFloatsPerRank(int ranks, size_t count) {
  std::vector<std::vector<float>> data(static_cast<size_t>(ranks), std::vector<float>(count));
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) {
      data[static_cast<size_t>(r)][i] = 0.1f * static_cast<float>(i) +
                                        1e-7f * static_cast<float>(r) +
                                        0.3f / static_cast<float>(r + 1);
    }
  }
  return data;
}

// Every rank's status is ok and every rank holds rank 0's bits.
inline void expectIdenticalBitsOnEveryRank(const std::vector<Status>& statuses,
                                           const std::vector<std::vector<float>>& results) {
  for (const Status& s : statuses) ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t r = 1; r < results.size(); ++r) {
    ASSERT_EQ(std::memcmp(results[0].data(), results[r].data(), results[0].size() * sizeof(float)),
              0)
        << "rank " << r << " differs from rank 0";
  }
}

}  // namespace gfshim
