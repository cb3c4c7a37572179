#include "mpi/pmpi_wait.h"

#include <algorithm>
#include <vector>

#include "common/task.h"
#include "transport/private_tags.h"

namespace gfshim {

int waitRequest(MPI_Request* request, MPI_Status* status) {
  if (!Task::inTask()) return PMPI_Wait(request, status);
  for (;;) {
    int done = 0;
    const int rc = PMPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS || done) return rc;
    Task::yield();
  }
}

int agreeMinimum(MPI_Comm comm, int64_t* values, int count) {
  if (!Task::inTask()) {
    return PMPI_Allreduce(MPI_IN_PLACE, values, count, MPI_INT64_T, MPI_MIN, comm);
  }
  int rank = 0, size = 1;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  std::vector<int64_t> received(static_cast<size_t>(count));
  // Round k: send what this rank knows to rank + 2^k, take the minimum with what rank - 2^k
  // knows. After round k every rank knows the minimum over the 2^(k+1) ranks before it.
  for (int distance = 1; distance < size; distance *= 2) {
    const int to = (rank + distance) % size;
    const int from = (rank - distance + size) % size;
    MPI_Request requests[2];
    int rc =
        PMPI_Irecv(received.data(), count, MPI_INT64_T, from, kAgreementTag, comm, &requests[0]);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Isend(values, count, MPI_INT64_T, to, kAgreementTag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) {
      PMPI_Cancel(&requests[0]);
      PMPI_Wait(&requests[0], MPI_STATUS_IGNORE);
      return rc;
    }
    rc = waitRequest(&requests[0], MPI_STATUS_IGNORE);
    const int sent = waitRequest(&requests[1], MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (sent != MPI_SUCCESS) return sent;
    for (int i = 0; i < count; ++i)
      values[i] = std::min(values[i], received[static_cast<size_t>(i)]);
  }
  return MPI_SUCCESS;
}

}  // namespace gfshim
