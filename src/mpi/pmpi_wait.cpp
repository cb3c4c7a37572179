#include "mpi/pmpi_wait.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/task.h"
#include "transport/private_tags.h"

namespace gfshim {

struct ParkedWaits::Parked {
  MPI_Request* request;
  MPI_Status* status;
  bool completed = false;  // by blockUntilOneCompletes, with rc
  int rc = MPI_SUCCESS;
};

namespace {

thread_local ParkedWaits* tDriving = nullptr;
thread_local bool tLeftToBlocking = false;
std::atomic<uint64_t> gEvents{0};

// Whether a wait in a task may test its transfer now. Not while a blocking driver resumes it under
// SimGrid SMPI 3.32: a transfer that MPI_Test completes stays in the simulated actor's list of
// activities for good (ActivityImpl::test finishes it with no simcall registered, and only a
// registered one removes it), and every later MPI_Wait* of that actor walks the whole list. The
// fused ResNet-50 replay's lists grew by about 1500 transfers a step per rank, and its simulation
// time grew with the square of the steps. Completed by PMPI_Waitany, a transfer leaves the list.
bool mayTest() {
#if defined(GFSHIM_SMPI)
  return !tLeftToBlocking;
#else
  return true;
#endif
}

}  // namespace

ParkedWaits::Driving::Driving(ParkedWaits* waits) : outer_(tDriving) { tDriving = waits; }

ParkedWaits::Driving::~Driving() { tDriving = outer_; }

ParkedWaits::LeftToBlocking::LeftToBlocking() : outer_(tLeftToBlocking) { tLeftToBlocking = true; }

ParkedWaits::LeftToBlocking::~LeftToBlocking() { tLeftToBlocking = outer_; }

uint64_t ParkedWaits::events() { return gEvents.load(std::memory_order_acquire); }

int waitRequest(MPI_Request* request, MPI_Status* status) {
  if (!Task::inTask()) return PMPI_Wait(request, status);
  gEvents.fetch_add(1, std::memory_order_acq_rel);
  // Parked where the driver of this task looks, if it has one (a task may be resumed by another
  // thread later: the parked entry stays in the ParkedWaits it was put in).
  ParkedWaits* const waits = tDriving;
  int done = 0;
  int rc = MPI_SUCCESS;
  if (waits == nullptr || mayTest()) {
    rc = PMPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS || done) return rc;
  }
  ParkedWaits::Parked parked{request, status};
  if (waits != nullptr) {
    std::lock_guard<std::mutex> lock(waits->mutex_);
    waits->parked_.push_back(&parked);
  }
  for (;;) {
    Task::yield();
    if (parked.completed) {
      rc = parked.rc;
      break;
    }
    if (waits != nullptr && !mayTest()) continue;
    rc = PMPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS || done) break;
  }
  if (waits != nullptr) {
    std::lock_guard<std::mutex> lock(waits->mutex_);
    waits->parked_.erase(std::find(waits->parked_.begin(), waits->parked_.end(), &parked));
  }
  gEvents.fetch_add(1, std::memory_order_acq_rel);
  return rc;
}

int ParkedWaits::blockUntilOneCompletes(const std::vector<ParkedWaits*>& drivers) {
  std::vector<Parked*> parked;
  std::vector<int> driverOf;
  for (size_t d = 0; d < drivers.size(); ++d) {
    std::lock_guard<std::mutex> lock(drivers[d]->mutex_);
    parked.insert(parked.end(), drivers[d]->parked_.begin(), drivers[d]->parked_.end());
    driverOf.resize(parked.size(), static_cast<int>(d));
  }
  std::vector<MPI_Request> requests;
  requests.reserve(parked.size());
  for (const Parked* wait : parked) requests.push_back(*wait->request);
  if (requests.empty()) return -1;
  int index = MPI_UNDEFINED;
  MPI_Status status;
  const int rc = PMPI_Waitany(static_cast<int>(requests.size()), requests.data(), &index, &status);
  if (index == MPI_UNDEFINED) return -1;
  Parked& done = *parked[static_cast<size_t>(index)];
  *done.request = requests[static_cast<size_t>(index)];  // MPI_REQUEST_NULL once freed
  if (done.status != MPI_STATUS_IGNORE) *done.status = status;
  done.rc = rc;
  done.completed = true;
  return driverOf[static_cast<size_t>(index)];
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
