// Transport: the point-to-point operations an algorithm schedule runs on. Implementations: PMPI
// on a private duplicate communicator (transport/pmpi_transport), and an in-process fake with
// rendezvous semantics for threads-as-ranks tests (transport/fake_transport).
//
// Contract, as for MPI nonblocking point-to-point: a posted send's buffer must stay untouched and
// a posted receive's buffer unread until wait() on its id returns; messages between one pair of
// ranks match in posting order; wait() or cancel() must be called exactly once for every posted
// id.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace gfshim {

using TransferId = int;

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

  // Bytes posted for sending over this transport so far: what the stats report as on the wire.
  uint64_t bytesPosted() const { return bytesPosted_; }

 protected:
  void countPosted(size_t bytes) { bytesPosted_ += bytes; }

 private:
  uint64_t bytesPosted_ = 0;
};

}  // namespace gfshim
