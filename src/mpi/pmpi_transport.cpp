#include "mpi/pmpi_transport.h"

#include <climits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mpi/pmpi_wait.h"
#include "transport/private_tags.h"

namespace gfshim {

Status mpiErrorStatus(const char* what, int mpiError) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  PMPI_Error_string(mpiError, text, &length);
  return Status::error(StatusCode::kTransportError, std::string(what) + ": " + text, mpiError);
}

namespace {

constexpr size_t kMaxAddedCodes = 32;

bool readsBack(int code, int errorClass, const std::string& text) {
  int classBack = -1;
  char textBack[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  return PMPI_Error_class(code, &classBack) == MPI_SUCCESS && classBack == errorClass &&
         PMPI_Error_string(code, textBack, &length) == MPI_SUCCESS && text == textBack;
}

}  // namespace

int readableErrorCode(int code, const std::string& text) {
  static std::mutex mutex;
  static auto* added = new std::vector<std::pair<std::string, int>>();  // never destroyed
  static bool unsupported = false;
  int errorClass = MPI_ERR_UNKNOWN;
  if (PMPI_Error_class(code, &errorClass) != MPI_SUCCESS) return code;
  const std::string key = std::to_string(errorClass) + "|" + text;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [seen, seenCode] : *added) {
    if (seen == key) return seenCode;
  }
  if (unsupported || added->size() >= kMaxAddedCodes) return code;
  // The MPI copies the string; a longer one may be rejected, so it is cut to the limit. (Not const:
  // SMPI declares the MPI-2 prototype, which takes a char*.)
  std::string bounded = text.substr(0, MPI_MAX_ERROR_STRING - 1);
  int readable = MPI_SUCCESS;
  if (PMPI_Add_error_code(errorClass, &readable) != MPI_SUCCESS ||
      PMPI_Add_error_string(readable, bounded.data()) != MPI_SUCCESS ||
      !readsBack(readable, errorClass, bounded)) {
    unsupported = true;
    return code;
  }
  added->emplace_back(key, readable);
  return readable;
}

TransferId PmpiTransport::allocate() {
  if (free_.empty()) {
    requests_.push_back(MPI_REQUEST_NULL);
    peers_.push_back(-1);
    expectedBytes_.push_back(-1);
    return static_cast<TransferId>(requests_.size() - 1);
  }
  const TransferId id = free_.back();
  free_.pop_back();
  return id;
}

// Posts one nonblocking operation into a request slot; `post` is PMPI_Isend or PMPI_Irecv.
template <typename Post>
Status PmpiTransport::postInto(const char* what, size_t bytes, int peer, bool receive,
                               TransferId* id, Post post) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::error(StatusCode::kInternal, "segment larger than INT_MAX bytes");
  }
  *id = allocate();
  peers_[static_cast<size_t>(*id)] = peer;
  expectedBytes_[static_cast<size_t>(*id)] = receive ? static_cast<int>(bytes) : -1;
  const int rc = post(static_cast<int>(bytes), &requests_[static_cast<size_t>(*id)]);
  if (rc != MPI_SUCCESS) {
    free_.push_back(*id);
    return mpiErrorStatus(what, rc);
  }
  return Status::ok();
}

Status PmpiTransport::postSend(const void* data, size_t bytes, int peer, TransferId* id) {
  countPosted(bytes);
  return postInto("PMPI_Isend", bytes, peer, false, id, [&](int count, MPI_Request* request) {
    return PMPI_Isend(data, count, MPI_BYTE, peer, kTransportTag, comm_, request);
  });
}

Status PmpiTransport::postRecv(void* data, size_t bytes, int peer, TransferId* id) {
  return postInto("PMPI_Irecv", bytes, peer, true, id, [&](int count, MPI_Request* request) {
    return PMPI_Irecv(data, count, MPI_BYTE, peer, kTransportTag, comm_, request);
  });
}

void PmpiTransport::cancel(TransferId id) {
  MPI_Request& request = requests_[static_cast<size_t>(id)];
  PMPI_Cancel(&request);
  PMPI_Wait(&request, MPI_STATUS_IGNORE);
  free_.push_back(id);
}

Status PmpiTransport::wait(TransferId id) {
  const size_t slot = static_cast<size_t>(id);
  waitState_.waitBegins(peers_[slot]);
  MPI_Status status;
  const int rc = waitRequest(&requests_[slot], &status);
  waitState_.waitEnds();
  free_.push_back(id);
  // Every schedule receives exactly what its peer sends, so a shorter (or, as MPI_ERR_TRUNCATE,
  // a longer) message means the ranks run different schedules: an erroneous program whose ranks
  // pass different counts or datatypes.
  const char* mismatch =
      " (the ranks disagree on the call: do they all pass the same count and "
      "datatype?)";
  if (rc != MPI_SUCCESS) {
    Status failed = mpiErrorStatus("PMPI_Wait", rc);
    int errorClass = MPI_SUCCESS;
    PMPI_Error_class(rc, &errorClass);
    if (errorClass != MPI_ERR_TRUNCATE) return failed;
    return Status::error(StatusCode::kTransportError, failed.message() + mismatch, rc);
  }
  if (expectedBytes_[slot] >= 0) {
    int received = 0;
    PMPI_Get_count(&status, MPI_BYTE, &received);
    if (received != expectedBytes_[slot]) {
      return Status::error(StatusCode::kTransportError,
                           "received " + std::to_string(received) + " bytes from rank " +
                               std::to_string(peers_[slot]) + " where the schedule expects " +
                               std::to_string(expectedBytes_[slot]) + mismatch,
                           MPI_ERR_COUNT);
    }
  }
  return Status::ok();
}

std::function<Status(uint64_t, bool*)> equalOn(MPI_Comm comm) {
  return [comm](uint64_t mine, bool* equal) {
    // MIN of v and of -v give the smallest and the largest: 62 bits keep -v in range.
    const auto value = static_cast<int64_t>(mine >> 2);
    int64_t bounds[2] = {value, -value};
    const int rc = agreeMinimum(comm, bounds, 2);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("agreement (equal values)", rc);
    *equal = bounds[0] == -bounds[1];
    return Status::ok();
  };
}

std::function<Status(bool, bool*)> logicalOrOn(MPI_Comm comm) {
  return [comm](bool mine, bool* any) {
    int64_t least = mine ? -1 : 0;  // MIN of -flag is -(logical OR)
    const int rc = agreeMinimum(comm, &least, 1);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("agreement (logical or)", rc);
    *any = least != 0;
    return Status::ok();
  };
}

}  // namespace gfshim
