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

}  // namespace gfshim
