// The round loop of the lazy allreduce, without MPI: one communicator's queue of operations and
// the loop its progress thread runs over them. mpi/fusion_queue.h drives it over PMPI with
// generalized requests; the threads-as-ranks test (tests/fake/fusion_rounds_fake_test.cpp) drives
// the same loop over the fake transport.
//
//   loop:  paused? sleep until an operation is queued (or stop) -> driver.gatherBurst()
//          n = queue length -> driver.agree(n) gives min and max over ranks (a collective)
//          decideRound(min, max) -> take `min` operations from the head of the queue
//          driver.took(taken) -> driver.reduce(taken) -> driver.complete(taken, status)
//          pause when min == max (every queue is empty), back off 50 us when min == 0 < max
//
// Cross-rank consistency: `take` comes from agreed values only (fusion_buckets.h), so every rank
// takes the same operations in every round. After a failed agreement or reduction the ranks may
// no longer agree, so the loop stops calling the driver's collectives and fails every operation
// queued later at once (complete with the failure).
//
// The loop runs on a progress thread (it sleeps on a condition variable while paused) or inside a
// task (common/task.h, GFSHIM_PROGRESS=calls): there it yields instead of sleeping, and idle()
// tells the code that resumes it whether there is anything to do.
//
// Driver (duck-typed; all calls come from inside run()):
//   void   gatherBurst();                       // after a pause: let the burst arrive
//   Status agree(int64_t queued, int64_t* least, int64_t* most);
//   void   took(std::vector<Op>& taken);        // taken from the queue (timeline)
//   Status reduce(std::vector<Op>& taken);      // only when agreed and taken is not empty
//   void   complete(std::vector<Op>& taken, const Status& status);
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/task.h"
#include "engine/fusion_buckets.h"

namespace gfshim {

template <typename Op>
class FusionRounds {
 public:
  // Queues an operation and wakes the loop. Any thread.
  void push(Op op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(op));
      idle_.store(false, std::memory_order_release);
    }
    wake_.notify_one();
  }

  // Makes run() return once a round found every rank's queue empty. Any thread.
  void requestStop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      idle_.store(false, std::memory_order_release);
    }
    wake_.notify_one();
  }

  // Paused with nothing queued and no stop requested: resuming the loop's task would only yield
  // again. Any thread.
  bool idle() const { return idle_.load(std::memory_order_acquire); }

  // `failure`: not ok when the driver could not be set up; every operation then fails at once.
  template <typename Driver>
  void run(Driver& driver, Status failure) {
    bool paused = true;
    for (;;) {
      int64_t queued = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (paused) {
          if (Task::inTask()) {
            while (!stopping_ && queue_.empty()) {
              idle_.store(true, std::memory_order_release);
              lock.unlock();
              Task::yield();
              lock.lock();
            }
          } else {
            wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
          }
          if (queue_.empty()) return;  // stopping, and every rank's queue was empty
        }
      }
      if (paused) driver.gatherBurst();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queued = static_cast<int64_t>(queue_.size());
      }
      int64_t least = queued, most = queued;
      Status status = failure;
      if (status.isOk()) status = driver.agree(queued, &least, &most);
      if (!status.isOk()) {
        // Without a working round the ranks cannot agree any more: fail what is queued.
        failure = status;
        least = queued;
        most = queued;
      }
      const RoundDecision round = decideRound(least, most);
      std::vector<Op> taken;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        taken.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.begin() + round.take));
        queue_.erase(queue_.begin(), queue_.begin() + round.take);
      }
      if (!taken.empty()) {
        driver.took(taken);
        if (status.isOk()) status = driver.reduce(taken);
        if (!status.isOk()) failure = status;
        driver.complete(taken, status);
      }
      paused = round.pause;  // operations queued since the round wake the loop again
      if (round.backOff) {
        // A peer has not queued the operations this rank holds yet: do not spin on rounds.
        if (!Task::yield()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  std::atomic<bool> idle_{false};
};

}  // namespace gfshim
