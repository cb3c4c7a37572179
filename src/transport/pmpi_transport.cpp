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

Status PmpiTransport::postSend(const void* data, size_t bytes, int peer, TransferId* id) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::error(StatusCode::kInternal, "segment larger than INT_MAX bytes");
  }
  *id = allocate();
  const int rc = PMPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, kTag, comm_,
                            &requests_[static_cast<size_t>(*id)]);
  if (rc != MPI_SUCCESS) {
    free_.push_back(*id);
    return mpiErrorStatus("PMPI_Isend", rc);
  }
  return Status::ok();
}

Status PmpiTransport::postRecv(void* data, size_t bytes, int peer, TransferId* id) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::error(StatusCode::kInternal, "segment larger than INT_MAX bytes");
  }
  *id = allocate();
  const int rc = PMPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, kTag, comm_,
                            &requests_[static_cast<size_t>(*id)]);
  if (rc != MPI_SUCCESS) {
    free_.push_back(*id);
    return mpiErrorStatus("PMPI_Irecv", rc);
  }
  return Status::ok();
}

Status PmpiTransport::wait(TransferId id) {
  const int rc = PMPI_Wait(&requests_[static_cast<size_t>(id)], MPI_STATUS_IGNORE);
  free_.push_back(id);
  return rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Wait", rc);
}

}  // namespace gfshim
