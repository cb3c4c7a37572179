// Transport over PMPI nonblocking point-to-point on the shim's private duplicate of a user
// communicator, so the shim's messages can never match the application's (different context,
// whatever the tags). The duplicate uses MPI_ERRORS_RETURN: an error becomes a Status here and is
// handed to the user's communicator error handler by the hook.
#pragma once

#include <mpi.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "mpi/stall_inspector.h"
#include "transport/transport.h"

namespace gfshim {

// Registered with the stall inspector while it exists: destroy it before freeing `comm`.
class PmpiTransport : public Transport {
 public:
  PmpiTransport(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {
    StallInspector::watch(comm_, rank_, size_, &waitState_);
  }
  ~PmpiTransport() override { StallInspector::unwatch(&waitState_); }
  PmpiTransport(const PmpiTransport&) = delete;
  PmpiTransport& operator=(const PmpiTransport&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status postSend(const void* data, size_t bytes, int peer, TransferId* id) override;
  Status postRecv(void* data, size_t bytes, int peer, TransferId* id) override;
  Status wait(TransferId id) override;
  void cancel(TransferId id) override;
  void operationStarted(const OperationLabel& label) override {
    waitState_.operationStarted(label);
  }
  // For the engine's own collectives on the communicator (e.g. fusion rounds), which the stall
  // inspector should see as waits too.
  WaitState& waitState() { return waitState_; }

 private:
  TransferId allocate();
  template <typename Post>
  Status postInto(const char* what, size_t bytes, int peer, bool receive, TransferId* id,
                  Post post);

  MPI_Comm comm_;
  int rank_;
  int size_;
  // A deque: a request stays where it is while another task posts more (two algorithms may run on
  // one transport at once, interleaved as tasks: the pipelined torus's lanes), since a wait inside
  // a task tests the request through its address across yields.
  std::deque<MPI_Request> requests_;
  // Per request slot: the rank it sends to or receives from, and the bytes a receive expects
  // (-1 for a send).
  std::vector<int> peers_;
  std::vector<int> expectedBytes_;
  std::vector<TransferId> free_;
  WaitState waitState_;
};

// A Status describing a failed MPI call (kTransportError carrying the MPI error code).
Status mpiErrorStatus(const char* what, int mpiError);

// Error codes the shim added to the MPI (MPI_Add_error_code) for the texts of its failures, so
// the application's MPI_Error_string(code) says what failed inside the shim and MPI_Error_class
// still gives the class of the original error. A failure text seen before gets its code again;
// after kMaxAddedCodes distinct texts the original code is returned (the MPI's error code space
// is finite and each added code lives until MPI_Finalize). Error path only, so a mutex is fine.
//
// Each added code is read back before use: MPICH 4.0.2 accepts a code added to a predefined
// class, but its MPI_Error_string then decodes it as an entry of its own error ring (garbage
// text). Where the read-back differs, the MPI cannot carry the text: the original code is used
// from then on (the WARN line on stderr still names the failure).
int readableErrorCode(int code, const std::string& text);

// A logical OR over the ranks of `comm` (one PMPI_Allreduce of an int): the engine's agreement
// for decisions a rank-local fact could split, e.g. LossyTarget::agreeAny.
std::function<Status(bool mine, bool* any)> logicalOrOn(MPI_Comm comm);
// Whether every rank of `comm` passed the same value (one MIN allreduce of two integers).
std::function<Status(uint64_t mine, bool* equal)> equalOn(MPI_Comm comm);

}  // namespace gfshim
