// Transport: the point-to-point operations an algorithm schedule runs on. Implementations: PMPI
// on a private duplicate communicator (src/mpi/pmpi_transport), and an in-process fake with
// rendezvous semantics for threads-as-ranks tests (tests/fake/fake_transport.h).
//
// Contract, as for MPI nonblocking point-to-point: a posted send's buffer must stay untouched and
// a posted receive's buffer unread until wait() on its id returns; messages between one pair of
// ranks match in posting order; wait() or cancel() must be called exactly once for every posted
// id. Two algorithms may use one transport at once, as tasks of one thread (common/task.h) that
// exchange messages with different peers (the pipelined torus's row and column lanes): a wait
// that yields must keep working while the other task posts and waits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/types.h"

namespace gfshim {

using TransferId = int;

// What an engine operation is, for the stall inspector's report ("ring allreduce of 1048576 x
// float sum"). `what` is a string literal.
struct OperationLabel {
  const char* what = nullptr;
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status postSend(const void* data, size_t bytes, int peer, TransferId* id) = 0;
  virtual Status postRecv(void* data, size_t bytes, int peer, TransferId* id) = 0;
  virtual Status wait(TransferId id) = 0;
  // Withdraws a posted operation after an error and releases its id (best effort: an operation
  // that already matched completes instead).
  virtual void cancel(TransferId id) = 0;

  // Called by the engine as it starts each operation over this transport; every rank of the
  // communicator starts the same operations in the same order, so their counts compare across
  // ranks (src/mpi/stall_inspector.h).
  virtual void operationStarted(const OperationLabel& /*label*/) {}

  // Bytes posted for sending over this transport so far: what the stats report as on the wire.
  uint64_t bytesPosted() const { return bytesPosted_; }

 protected:
  void countPosted(size_t bytes) { bytesPosted_ += bytes; }

 private:
  uint64_t bytesPosted_ = 0;
};

}  // namespace gfshim
