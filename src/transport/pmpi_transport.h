// Transport over PMPI nonblocking point-to-point on the shim's private duplicate of a user
// communicator, so the shim's messages can never match the application's (different context,
// whatever the tags). The duplicate uses MPI_ERRORS_RETURN: an error becomes a Status here and is
// handed to the user's communicator error handler by the hook.
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

#include "transport/transport.h"

namespace gfshim {

class PmpiTransport : public Transport {
 public:
  PmpiTransport(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status postSend(const void* data, size_t bytes, int peer, TransferId* id) override;
  Status postRecv(void* data, size_t bytes, int peer, TransferId* id) override;
  Status wait(TransferId id) override;
  void cancel(TransferId id) override;

 private:
  TransferId allocate();
  template <typename Post>
  Status postInto(const char* what, size_t bytes, TransferId* id, Post post);

  static constexpr int kTag = 0x6f5;
  MPI_Comm comm_;
  int rank_;
  int size_;
  std::vector<MPI_Request> requests_;
  std::vector<TransferId> free_;
};

// A Status describing a failed MPI call (kTransportError carrying the MPI error code).
Status mpiErrorStatus(const char* what, int mpiError);

// A logical OR over the ranks of `comm` (one PMPI_Allreduce of an int): the engine's agreement
// for decisions a rank-local fact could split, e.g. LossyTarget::agreeAny.
std::function<Status(bool mine, bool* any)> logicalOrOn(MPI_Comm comm);

}  // namespace gfshim
