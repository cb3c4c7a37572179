// Threads as ranks over the fake transport, shared by the threads-as-ranks tests.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "transport/fake_transport.h"

namespace gfshim {

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

}  // namespace gfshim
