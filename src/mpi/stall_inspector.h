// The stall inspector (GFSHIM_STALL_WARN_SEC): a watchdog thread that notices when a rank has
// waited in the engine longer than the threshold and logs which operation it waits for and which
// ranks of the communicator have not joined it, like Horovod's stall check.
//
// Every PmpiTransport owns a WaitState that the thread running it updates (an operation starts, a
// wait begins and ends: a few relaxed atomic stores) and registers it here. About once a second
// the watchdog
//  - answers its peers: a query (kStallQueryTag) on a watched communicator gets this rank's
//    count of operations started there and how long it has been waiting (kStallAnswerTag);
//  - for every registered wait older than the threshold, asks the other ranks of that
//    communicator, and once they have answered (or after a grace period of two ticks) logs one
//    WARN line (transport/stall_report.h); it warns again after each further threshold.
// Answers come from the watchdogs, not from the engine, so a rank that is still computing, or is
// stuck anywhere outside the engine, answers too; one that died or hangs inside the MPI does not.
// The watchdog calls PMPI on communicators other threads use, so it asks peers only under
// MPI_THREAD_MULTIPLE; without it the line names the operation and the peer waited for.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>

#include "transport/transport.h"

namespace gfshim {

class WaitState {
 public:
  // The engine thread's side.
  void operationStarted(const OperationLabel& label);
  void waitBegins(int peer);  // peer -1: a collective
  void waitEnds() { waitingSinceNs_.store(0, std::memory_order_relaxed); }

  // The watchdog's side (relaxed: a torn label only garbles one log line).
  uint64_t operations() const { return operations_.load(std::memory_order_relaxed); }
  int64_t waitingSinceNs() const { return waitingSinceNs_.load(std::memory_order_relaxed); }
  int peer() const { return peer_.load(std::memory_order_relaxed); }
  OperationLabel label() const;

 private:
  std::atomic<uint64_t> operations_{0};
  std::atomic<int64_t> waitingSinceNs_{0};  // 0: not waiting
  std::atomic<int> peer_{-1};
  std::atomic<const char*> what_{nullptr};
  std::atomic<int64_t> count_{0};
  std::atomic<uint8_t> dtype_{0};
  std::atomic<uint8_t> op_{0};
};

// The clock of WaitState (CLOCK_MONOTONIC_COARSE: a few ns per read, ms resolution).
int64_t stallClockNs();

class StallInspector {
 public:
  // From the init hook: starts the watchdog when warnSeconds > 0.
  static void configure(double warnSeconds, bool askPeers);
  // From the finalize hook, before PMPI_Finalize: joins the watchdog.
  static void stop();
  // `state` waits on `comm` (a private communicator of the shim) as rank `rank` of `size`;
  // unwatch before the communicator is freed.
  static void watch(MPI_Comm comm, int rank, int size, WaitState* state);
  static void unwatch(WaitState* state);
};

}  // namespace gfshim
