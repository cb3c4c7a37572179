// Threads as ranks for the lazy allreduce: the real round loop (engine/fusion_rounds.h), the real
// bucket packing and the real ring over the rendezvous fake transport. Every rank runs an
// application thread and one progress thread per communicator. The application threads post the
// same operations per communicator in the same order (as MPI requires), but interleave the
// communicators in a different random order on every rank and sleep randomly between posts, so
// the queues every round sees differ from rank to rank. Checked: every operation completes with
// the exact result, and every rank cut the same buckets in the same rounds. The same runs again
// with progress in calls (GFSHIM_PROGRESS=calls): no progress threads, every loop a task
// (common/task.h) that its rank's application thread resumes after each post and while it waits,
// so one thread drives several communicators whose peers wait for each other in turn.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/task.h"
#include "engine/execute.h"
#include "engine/fusion_rounds.h"
#include "fake/fake_transport.h"

namespace gfshim {
namespace {

// One rank's count of completed operations, which its application thread waits on.
struct Completions {
  std::mutex mutex;
  std::condition_variable changed;
  size_t done = 0;
  size_t failed = 0;
};

struct FakeOp {
  uint64_t id = 0;  // position in the communicator's sequence: the same on every rank
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  Completions* completions = nullptr;
};

Plan ringPlan() {
  Plan plan;
  plan.route = Route::kEngine;
  plan.algo = Algo::kRing;
  plan.reason = Reason::kRingForced;
  plan.segmentBytes = 512;
  return plan;
}

// The driver of one rank's loop on one communicator: agreement and buckets through the ring.
class FakeDriver {
 public:
  FakeDriver(FakeFabric& fabric, int rank, uint64_t fusionBytes)
      : transport_(fabric, rank), fusionBytes_(fusionBytes) {}

  void gatherBurst() {}

  Status agree(int64_t queued, int64_t* least, int64_t* most) {
    int64_t values[2] = {queued, -queued};
    CallInfo call;
    call.count = 2;
    call.dtype = DType::kInt64;
    call.op = RedOp::kMin;
    call.inPlace = true;
    GFSHIM_RETURN_IF_ERROR(executePlan(ringPlan(), call, transport_, workspace_, values, values));
    *least = values[0];
    *most = -values[1];
    ++rounds;
    return Status::ok();
  }

  void took(std::vector<FakeOp>&) {}

  Status reduce(std::vector<FakeOp>& taken) {
    std::vector<FusibleOp> shapes;
    for (const FakeOp& op : taken) shapes.push_back({op.count, op.dtype, op.op});
    for (const FusionBucket& bucket : packBuckets(shapes, fusionBytes_)) {
      std::vector<std::byte> packed(bucket.bytes);
      std::vector<uint64_t> ids;
      size_t offset = 0;
      for (size_t index : bucket.ops) {
        const FakeOp& op = taken[index];
        const size_t bytes = static_cast<size_t>(op.count) * dtypeBytes(op.dtype);
        if (bytes > 0) std::memcpy(packed.data() + offset, op.send, bytes);
        offset += bytes;
        ids.push_back(op.id);
      }
      CallInfo call;
      call.count = bucket.count;
      call.dtype = bucket.dtype;
      call.op = bucket.op;
      call.inPlace = true;
      GFSHIM_RETURN_IF_ERROR(
          executePlan(ringPlan(), call, transport_, workspace_, packed.data(), packed.data()));
      offset = 0;
      for (size_t index : bucket.ops) {
        const FakeOp& op = taken[index];
        const size_t bytes = static_cast<size_t>(op.count) * dtypeBytes(op.dtype);
        if (bytes > 0) std::memcpy(op.recv, packed.data() + offset, bytes);
        offset += bytes;
      }
      buckets.push_back(std::move(ids));
    }
    return Status::ok();
  }

  void complete(std::vector<FakeOp>& taken, const Status& status) {
    Completions& completions = *taken.front().completions;
    {
      std::lock_guard<std::mutex> lock(completions.mutex);
      completions.done += taken.size();
      if (!status.isOk()) completions.failed += taken.size();
    }
    completions.changed.notify_all();
  }

  std::vector<std::vector<uint64_t>> buckets;  // the operations of every bucket, in order
  int64_t rounds = 0;

 private:
  FakeTransport transport_;
  Workspace workspace_;
  uint64_t fusionBytes_;
};

struct OpShape {
  int64_t count;
  DType dtype;
  RedOp op;
};

// Small integers, so every sum, max and product-free reduction is exact in any order.
int32_t valueOf(int rank, uint64_t id, int64_t i) {
  return static_cast<int32_t>((rank * 7 + static_cast<int64_t>(id) * 3 + i) % 61) - 20;
}

void fill(std::byte* out, DType dtype, int rank, uint64_t id, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = valueOf(rank, id, i);
    if (dtype == DType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(out + i * 4, &f, 4);
    } else {
      std::memcpy(out + i * 4, &v, 4);
    }
  }
}

void expectResult(const std::byte* got, const OpShape& shape, int ranks, uint64_t id) {
  for (int64_t i = 0; i < shape.count; ++i) {
    int32_t expected = shape.op == RedOp::kMax ? INT32_MIN : 0;
    for (int r = 0; r < ranks; ++r) {
      const int32_t v = valueOf(r, id, i);
      expected = shape.op == RedOp::kMax ? std::max(expected, v) : expected + v;
    }
    if (shape.dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, got + i * 4, 4);
      ASSERT_EQ(f, static_cast<float>(expected)) << "operation " << id << " element " << i;
    } else {
      int32_t v;
      std::memcpy(&v, got + i * 4, 4);
      ASSERT_EQ(v, expected) << "operation " << id << " element " << i;
    }
  }
}

enum class Progress { kThreads, kCalls };

// Resumes every task of `tasks` that has work (progress in calls); true once all have finished.
bool resumeAll(std::vector<std::unique_ptr<Task>>& tasks,
               const std::vector<FusionRounds<FakeOp>*>& loops) {
  bool finished = true;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!loops[i]->idle()) tasks[i]->resume();
    finished = finished && tasks[i]->finished();
  }
  return finished;
}

void runRandomBursts(int ranks, int comms, size_t opsPerComm, uint64_t fusionBytes, unsigned seed,
                     Progress mode = Progress::kThreads) {
  SCOPED_TRACE(testing::Message() << "ranks=" << ranks << " comms=" << comms
                                  << " fusionBytes=" << fusionBytes << " seed=" << seed
                                  << (mode == Progress::kCalls ? " progress in calls" : ""));
  // The operations of every communicator: what MPI requires to match on all ranks.
  std::mt19937 shapesRandom(seed);
  std::vector<std::vector<OpShape>> shapes(static_cast<size_t>(comms));
  const DType dtypes[] = {DType::kFloat32, DType::kInt32};
  for (auto& sequence : shapes) {
    for (size_t k = 0; k < opsPerComm; ++k) {
      const int64_t count = static_cast<int64_t>(shapesRandom() % 700);  // 0 included
      const DType dtype = dtypes[shapesRandom() % 2];
      const RedOp op =
          dtype == DType::kInt32 && shapesRandom() % 3 == 0 ? RedOp::kMax : RedOp::kSum;
      sequence.push_back({count, dtype, op});
    }
  }

  std::vector<std::unique_ptr<FakeFabric>> fabrics;
  for (int c = 0; c < comms; ++c) fabrics.push_back(std::make_unique<FakeFabric>(ranks));
  const size_t loops = static_cast<size_t>(ranks * comms);
  std::vector<std::unique_ptr<FusionRounds<FakeOp>>> rounds(loops);
  std::vector<std::unique_ptr<FakeDriver>> drivers(loops);
  std::vector<std::thread> progress;
  for (int r = 0; r < ranks; ++r) {
    for (int c = 0; c < comms; ++c) {
      const size_t k = static_cast<size_t>(r * comms + c);
      rounds[k] = std::make_unique<FusionRounds<FakeOp>>();
      drivers[k] = std::make_unique<FakeDriver>(*fabrics[static_cast<size_t>(c)], r, fusionBytes);
      if (mode == Progress::kThreads) {
        progress.emplace_back([&, k] { rounds[k]->run(*drivers[k], Status::ok()); });
      }
    }
  }

  // Buffers per (rank, communicator, operation); ints and floats are both 4 bytes.
  std::vector<std::vector<std::vector<std::byte>>> send(loops), recv(loops);
  std::vector<Completions> completions(static_cast<size_t>(ranks));
  // char, not bool: each application thread writes its own element (vector<bool> would pack them
  // into one word and race)
  std::vector<char> finished(static_cast<size_t>(ranks), 0);
  std::vector<std::thread> applications;
  for (int r = 0; r < ranks; ++r) {
    applications.emplace_back([&, r] {
      // Progress in calls: this rank's loops, one task each, resumed by this thread only.
      std::vector<std::unique_ptr<Task>> tasks;
      std::vector<FusionRounds<FakeOp>*> loops;
      if (mode == Progress::kCalls) {
        for (int c = 0; c < comms; ++c) {
          const size_t k = static_cast<size_t>(r * comms + c);
          loops.push_back(rounds[k].get());
          tasks.push_back(
              std::make_unique<Task>([&, k] { rounds[k]->run(*drivers[k], Status::ok()); }));
        }
      }
      std::mt19937 local(seed * 1000 + static_cast<unsigned>(r));
      // This rank's interleaving of the communicators' sequences.
      std::vector<int> order;
      for (int c = 0; c < comms; ++c) order.insert(order.end(), opsPerComm, c);
      std::shuffle(order.begin(), order.end(), local);
      std::vector<size_t> next(static_cast<size_t>(comms), 0);
      for (int c = 0; c < comms; ++c) {
        const size_t k = static_cast<size_t>(r * comms + c);
        send[k].resize(opsPerComm);
        recv[k].resize(opsPerComm);
      }
      for (int c : order) {
        const size_t k = static_cast<size_t>(r * comms + c);
        const size_t index = next[static_cast<size_t>(c)]++;
        const OpShape& shape = shapes[static_cast<size_t>(c)][index];
        const size_t bytes = static_cast<size_t>(shape.count) * 4;
        send[k][index].resize(bytes);
        recv[k][index].assign(bytes, std::byte{0x5a});  // poison
        fill(send[k][index].data(), shape.dtype, r, index, shape.count);
        FakeOp op;
        op.id = index;
        op.send = send[k][index].data();
        op.recv = recv[k][index].data();
        op.count = shape.count;
        op.dtype = shape.dtype;
        op.op = shape.op;
        op.completions = &completions[static_cast<size_t>(r)];
        rounds[k]->push(op);
        resumeAll(tasks, loops);
        const unsigned pause = local() % 100;
        if (pause < 30) std::this_thread::sleep_for(std::chrono::microseconds(pause * 10));
      }
      Completions& mine = completions[static_cast<size_t>(r)];
      const size_t total = opsPerComm * static_cast<size_t>(comms);
      if (mode == Progress::kCalls) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        bool done = false;
        while (!done && std::chrono::steady_clock::now() < deadline) {
          resumeAll(tasks, loops);
          std::lock_guard<std::mutex> lock(mine.mutex);
          done = mine.done == total;
        }
        finished[static_cast<size_t>(r)] = done;
        for (FusionRounds<FakeOp>* loop : loops) loop->requestStop();
        while (!resumeAll(tasks, loops)) {
        }
        return;
      }
      std::unique_lock<std::mutex> lock(mine.mutex);
      finished[static_cast<size_t>(r)] =
          mine.changed.wait_for(lock, std::chrono::seconds(60), [&] { return mine.done == total; });
    });
  }
  for (std::thread& t : applications) t.join();
  for (auto& loop : rounds) loop->requestStop();
  for (std::thread& t : progress) t.join();

  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(finished[static_cast<size_t>(r)]) << "rank " << r << " timed out: deadlock";
    ASSERT_EQ(completions[static_cast<size_t>(r)].failed, 0u) << "rank " << r;
  }
  for (int c = 0; c < comms; ++c) {
    const FakeDriver& first = *drivers[static_cast<size_t>(c)];
    size_t fused = 0;
    for (const auto& bucket : first.buckets) fused += bucket.size();
    EXPECT_EQ(fused, opsPerComm) << "communicator " << c << ": every operation in one bucket";
    for (int r = 1; r < ranks; ++r) {
      const FakeDriver& other = *drivers[static_cast<size_t>(r * comms + c)];
      EXPECT_EQ(other.buckets, first.buckets) << "rank " << r << " cut other buckets, comm " << c;
      EXPECT_EQ(other.rounds, first.rounds) << "rank " << r << " ran other rounds, comm " << c;
    }
    for (int r = 0; r < ranks; ++r) {
      const size_t k = static_cast<size_t>(r * comms + c);
      for (size_t index = 0; index < opsPerComm; ++index) {
        ASSERT_NO_FATAL_FAILURE(expectResult(recv[k][index].data(),
                                             shapes[static_cast<size_t>(c)][index], ranks, index))
            << "rank " << r << " communicator " << c;
      }
    }
  }
}

TEST(FusionRoundsFake, RandomBurstsOnOneCommunicator) {
  for (int ranks = 1; ranks <= 5; ++ranks) runRandomBursts(ranks, 1, 150, 4096, 11u + ranks);
}

TEST(FusionRoundsFake, TwoCommunicatorsInterleavedDifferentlyOnEveryRank) {
  for (int ranks = 2; ranks <= 4; ++ranks) runRandomBursts(ranks, 2, 120, 2048, 29u + ranks);
}

TEST(FusionRoundsFake, ProgressInCallsOnOneCommunicator) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    runRandomBursts(ranks, 1, 150, 4096, 11u + ranks, Progress::kCalls);
  }
}

TEST(FusionRoundsFake, ProgressInCallsDrivesInterleavedCommunicatorsFromOneThread) {
  for (int ranks = 2; ranks <= 4; ++ranks) {
    runRandomBursts(ranks, 3, 100, 2048, 31u + ranks, Progress::kCalls);
  }
}

TEST(FusionRoundsFake, LargeFusionBytesPutsABurstIntoFewBuckets) {
  runRandomBursts(3, 1, 200, 64u << 20, 5u);
}

// The ranks' loops agree to stop only when every queue is empty: a stop requested while a peer
// still posts finishes that peer's operations first.
TEST(FusionRoundsFake, StopRequestedEarlyStillCompletesEverything) {
  const int ranks = 3;
  FakeFabric fabric(ranks);
  std::vector<std::unique_ptr<FusionRounds<FakeOp>>> rounds;
  std::vector<std::unique_ptr<FakeDriver>> drivers;
  std::vector<Completions> completions(ranks);
  std::vector<std::vector<std::byte>> buffers(ranks, std::vector<std::byte>(40 * 4));
  for (int r = 0; r < ranks; ++r) {
    rounds.push_back(std::make_unique<FusionRounds<FakeOp>>());
    drivers.push_back(std::make_unique<FakeDriver>(fabric, r, 4096));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      // Rank 2 posts late; ranks 0 and 1 ask to stop before it has.
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int k = 0; k < 40; ++k) {
        std::byte* slot = buffers[static_cast<size_t>(r)].data() + k * 4;
        fill(slot, DType::kInt32, r, static_cast<uint64_t>(k), 1);
        rounds[static_cast<size_t>(r)]->push(
            {static_cast<uint64_t>(k), slot, slot, 1, DType::kInt32, RedOp::kSum, &completions[r]});
      }
      rounds[static_cast<size_t>(r)]->requestStop();
      rounds[static_cast<size_t>(r)]->run(*drivers[static_cast<size_t>(r)], Status::ok());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(completions[static_cast<size_t>(r)].done, 40u) << "rank " << r;
    for (int k = 0; k < 40; ++k) {
      ASSERT_NO_FATAL_FAILURE(expectResult(buffers[static_cast<size_t>(r)].data() + k * 4,
                                           {1, DType::kInt32, RedOp::kSum}, ranks,
                                           static_cast<uint64_t>(k)));
    }
  }
}

// A loop whose driver could not be set up fails every operation at once, without any collective.
TEST(FusionRoundsFake, FailedSetUpFailsOperationsWithoutCollectives) {
  FakeFabric fabric(2);
  FakeDriver driver(fabric, 0, 4096);
  FusionRounds<FakeOp> rounds;
  Completions completions;
  std::byte slot[4] = {};
  std::thread loop(
      [&] { rounds.run(driver, Status::error(StatusCode::kTransportError, "no transport")); });
  for (uint64_t k = 0; k < 5; ++k) {
    rounds.push({k, slot, slot, 1, DType::kInt32, RedOp::kSum, &completions});
  }
  {
    std::unique_lock<std::mutex> lock(completions.mutex);
    ASSERT_TRUE(completions.changed.wait_for(lock, std::chrono::seconds(20),
                                             [&] { return completions.done == 5; }));
  }
  rounds.requestStop();
  loop.join();
  EXPECT_EQ(completions.failed, 5u);
  EXPECT_EQ(driver.rounds, 0);
  EXPECT_TRUE(driver.buckets.empty());
}

}  // namespace
}  // namespace gfshim
