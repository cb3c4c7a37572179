// What the stall inspector (src/mpi/stall_inspector.h) says about one stalled wait: a pure
// function of what the waiting rank knows and what its peers answered, so the wording and the
// "who has not joined" rule are unit-tested without MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace gfshim {

// A peer's answer to "which operation are you at on this communicator?".
struct StallAnswer {
  bool answered = false;       // false: no answer within the inspector's grace period
  uint64_t operations = 0;     // engine operations the peer has started on the communicator
  double waitingSeconds = -1;  // how long it has been waiting in the engine; -1: not waiting
};

struct StallReport {
  int rank = 0;  // the waiting rank, in the communicator
  int size = 0;
  uint64_t operation = 0;  // the waiting operation's number on the communicator (1, 2, ...)
  OperationLabel label;
  double waitedSeconds = 0;
  int peer = -1;  // the rank the wait is for; -1: a collective
  // One per rank of the communicator (the waiting rank's own entry is ignored); empty when the
  // peers could not be asked (no MPI_THREAD_MULTIPLE).
  std::vector<StallAnswer> answers;
};

// "stall: waited 61.0 s in engine operation #17 on a communicator of 4 ranks (ring allreduce of
// 1048576 x float sum), for rank 2; not joined: rank 2 (at operation #16, computing), rank 3 (no
// answer); waiting in it too: rank 1 (60.2 s)". A rank has joined an operation when it has started
// it (its count of started operations is at least the operation's number).
std::string formatStallReport(const StallReport& report);

}  // namespace gfshim
