#include "mpi/stall_inspector.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "transport/private_tags.h"
#include "transport/stall_report.h"

namespace gfshim {

int64_t stallClockNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

void WaitState::operationStarted(const OperationLabel& label) {
  what_.store(label.what, std::memory_order_relaxed);
  count_.store(label.count, std::memory_order_relaxed);
  dtype_.store(static_cast<uint8_t>(label.dtype), std::memory_order_relaxed);
  op_.store(static_cast<uint8_t>(label.op), std::memory_order_relaxed);
  operations_.fetch_add(1, std::memory_order_relaxed);
}

void WaitState::waitBegins(int peer) {
  peer_.store(peer, std::memory_order_relaxed);
  waitingSinceNs_.store(stallClockNs(), std::memory_order_relaxed);
}

OperationLabel WaitState::label() const {
  OperationLabel label;
  label.what = what_.load(std::memory_order_relaxed);
  label.count = count_.load(std::memory_order_relaxed);
  label.dtype = static_cast<DType>(dtype_.load(std::memory_order_relaxed));
  label.op = static_cast<RedOp>(op_.load(std::memory_order_relaxed));
  return label;
}

namespace {

// Ticks a rank waits for its peers' answers before it reports without them. Peers answer on their
// own watchdog's tick, which a loaded machine (ranks outnumbering cores) can delay by several.
constexpr int kGraceTicks = 4;

// One watched wait state and the watchdog's progress on it.
struct Watched {
  MPI_Comm comm;
  int rank;
  int size;
  WaitState* state;
  int64_t waitSeen = 0;        // the waitingSinceNs the warnings below refer to
  double nextWarnSeconds = 0;  // warn when the wait is older than this
  int askedTicksAgo = -1;      // -1: not asking
  std::vector<StallAnswer> answers;
};

struct Watchdog {
  std::mutex mutex;
  std::condition_variable stopped;
  bool stopping = false;
  double warnSeconds = 0;
  bool askPeers = false;
  std::vector<Watched> watched;
  std::thread thread;

  void run();
  void tick(Watched& w, int64_t now);
  void answerQueries(Watched& w);
  void collectAnswers(Watched& w);
};

Watchdog& watchdog() {
  static Watchdog* const instance = new Watchdog();  // outlives every thread
  return *instance;
}

bool probe(MPI_Comm comm, int tag, MPI_Status* status) {
  int flag = 0;
  return PMPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, status) == MPI_SUCCESS && flag != 0;
}

void Watchdog::answerQueries(Watched& w) {
  MPI_Status status;
  while (probe(w.comm, kStallQueryTag, &status)) {
    int64_t question = 0;
    if (PMPI_Recv(&question, 1, MPI_INT64_T, status.MPI_SOURCE, kStallQueryTag, w.comm,
                  MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
    const int64_t since = w.state->waitingSinceNs();
    const int64_t answer[2] = {static_cast<int64_t>(w.state->operations()),
                               since == 0 ? -1 : (stallClockNs() - since) / 1000000};
    PMPI_Send(answer, 2, MPI_INT64_T, status.MPI_SOURCE, kStallAnswerTag, w.comm);
  }
}

void Watchdog::collectAnswers(Watched& w) {
  MPI_Status status;
  while (probe(w.comm, kStallAnswerTag, &status)) {
    int64_t answer[2] = {0, -1};
    if (PMPI_Recv(answer, 2, MPI_INT64_T, status.MPI_SOURCE, kStallAnswerTag, w.comm,
                  MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
    // Late answers to an earlier question are dropped.
    if (w.askedTicksAgo < 0 || status.MPI_SOURCE < 0 || status.MPI_SOURCE >= w.size) continue;
    StallAnswer& a = w.answers[static_cast<size_t>(status.MPI_SOURCE)];
    a.answered = true;
    a.operations = static_cast<uint64_t>(answer[0]);
    a.waitingSeconds = answer[1] < 0 ? -1 : static_cast<double>(answer[1]) / 1000;
  }
}

void Watchdog::tick(Watched& w, int64_t now) {
  if (askPeers) {
    answerQueries(w);
    collectAnswers(w);
  }
  const int64_t since = w.state->waitingSinceNs();
  if (since != w.waitSeen) {  // a new wait, or none
    w.waitSeen = since;
    w.nextWarnSeconds = warnSeconds;
    w.askedTicksAgo = -1;
  }
  if (since == 0) return;
  const double waited = static_cast<double>(now - since) / 1e9;
  if (waited < w.nextWarnSeconds) return;
  if (askPeers && w.askedTicksAgo < 0) {
    w.answers.assign(static_cast<size_t>(w.size), StallAnswer{});
    const int64_t question = static_cast<int64_t>(w.state->operations());
    for (int r = 0; r < w.size; ++r) {
      if (r != w.rank) PMPI_Send(&question, 1, MPI_INT64_T, r, kStallQueryTag, w.comm);
    }
    w.askedTicksAgo = 0;
    return;
  }
  if (askPeers) {
    const bool all = std::all_of(w.answers.begin(), w.answers.end(), [&](const StallAnswer& a) {
      return a.answered || &a == &w.answers[static_cast<size_t>(w.rank)];
    });
    if (!all && ++w.askedTicksAgo < kGraceTicks) return;
  }
  StallReport report;
  report.rank = w.rank;
  report.size = w.size;
  report.operation = w.state->operations();
  report.label = w.state->label();
  report.waitedSeconds = waited;
  report.peer = w.state->peer();
  if (askPeers) report.answers = w.answers;
  GFSHIM_WARN(kEngine, "%s", formatStallReport(report).c_str());
  w.askedTicksAgo = -1;
  w.nextWarnSeconds += warnSeconds;
}

void Watchdog::run() {
  prctl(PR_SET_NAME, "gfshim-stall", 0, 0, 0);
  const auto period = std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(warnSeconds * 1000 / 4, 10.0, 1000.0)));
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopped.wait_for(lock, period, [this] { return stopping; })) {
    const int64_t now = stallClockNs();
    for (Watched& w : watched) tick(w, now);
  }
}

}  // namespace

void StallInspector::configure(double warnSeconds, bool askPeers) {
  Watchdog& dog = watchdog();
  if (warnSeconds <= 0 || dog.thread.joinable()) return;
  dog.warnSeconds = warnSeconds;
  dog.askPeers = askPeers;
  dog.stopping = false;
  dog.thread = std::thread([&dog] { dog.run(); });
}

void StallInspector::stop() {
  Watchdog& dog = watchdog();
  if (!dog.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(dog.mutex);
    dog.stopping = true;
  }
  dog.stopped.notify_all();
  dog.thread.join();
}

void StallInspector::watch(MPI_Comm comm, int rank, int size, WaitState* state) {
  Watchdog& dog = watchdog();
  std::lock_guard<std::mutex> lock(dog.mutex);
  Watched w;
  w.comm = comm;
  w.rank = rank;
  w.size = size;
  w.state = state;
  dog.watched.push_back(w);
}

void StallInspector::unwatch(WaitState* state) {
  Watchdog& dog = watchdog();
  std::lock_guard<std::mutex> lock(dog.mutex);
  dog.watched.erase(std::remove_if(dog.watched.begin(), dog.watched.end(),
                                   [state](const Watched& w) { return w.state == state; }),
                    dog.watched.end());
}

}  // namespace gfshim
