#include "transport/pmpi_transport.h"

#include <climits>
#include <string>

namespace gfshim {

Status mpiErrorStatus(const char* what, int mpiError) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  PMPI_Error_string(mpiError, text, &length);
  return Status::error(StatusCode::kTransportError, std::string(what) + ": " + text, mpiError);
}

TransferId PmpiTransport::allocate() {
  if (free_.empty()) {
    requests_.push_back(MPI_REQUEST_NULL);
    return static_cast<TransferId>(requests_.size() - 1);
  }
  const TransferId id = free_.back();
  free_.pop_back();
  return id;
}

// Posts one nonblocking operation into a request slot; `post` is PMPI_Isend or PMPI_Irecv.
template <typename Post>
Status PmpiTransport::postInto(const char* what, size_t bytes, TransferId* id, Post post) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::error(StatusCode::kInternal, "segment larger than INT_MAX bytes");
  }
  *id = allocate();
  const int rc = post(static_cast<int>(bytes), &requests_[static_cast<size_t>(*id)]);
  if (rc != MPI_SUCCESS) {
    free_.push_back(*id);
    return mpiErrorStatus(what, rc);
  }
  return Status::ok();
}

Status PmpiTransport::postSend(const void* data, size_t bytes, int peer, TransferId* id) {
  countPosted(bytes);
  return postInto("PMPI_Isend", bytes, id, [&](int count, MPI_Request* request) {
    return PMPI_Isend(data, count, MPI_BYTE, peer, kTag, comm_, request);
  });
}

Status PmpiTransport::postRecv(void* data, size_t bytes, int peer, TransferId* id) {
  return postInto("PMPI_Irecv", bytes, id, [&](int count, MPI_Request* request) {
    return PMPI_Irecv(data, count, MPI_BYTE, peer, kTag, comm_, request);
  });
}

void PmpiTransport::cancel(TransferId id) {
  MPI_Request& request = requests_[static_cast<size_t>(id)];
  PMPI_Cancel(&request);
  PMPI_Wait(&request, MPI_STATUS_IGNORE);
  free_.push_back(id);
}

Status PmpiTransport::wait(TransferId id) {
  const int rc = PMPI_Wait(&requests_[static_cast<size_t>(id)], MPI_STATUS_IGNORE);
  free_.push_back(id);
  return rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Wait", rc);
}

std::function<Status(bool, bool*)> logicalOrOn(MPI_Comm comm) {
  return [comm](bool mine, bool* any) {
    int flag = mine ? 1 : 0;
    const int rc = PMPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_LOR, comm);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce", rc);
    *any = flag != 0;
    return Status::ok();
  };
}

}  // namespace gfshim
