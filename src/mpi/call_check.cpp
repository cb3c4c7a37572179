#include "mpi/call_check.h"

#include <algorithm>

#include "mpi/pmpi_transport.h"
#include "mpi/pmpi_wait.h"

namespace gfshim {

Status agreeLeastAndMost(MPI_Comm comm, WaitState& wait, const OperationLabel& label,
                         std::vector<int64_t>& values) {
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) values.push_back(-values[i]);  // MIN of -v is -MAX of v
  wait.operationStarted(label);
  wait.waitBegins(-1);
  const int rc = agreeMinimum(comm, values.data(), static_cast<int>(values.size()));
  wait.waitEnds();
  if (rc != MPI_SUCCESS) {
    return mpiErrorStatus(("agreement (" + std::string(label.what) + ")").c_str(), rc);
  }
  for (size_t i = 0; i < n; ++i) values[n + i] = -values[n + i];
  return Status::ok();
}

namespace {

std::string describe(const CallShape& shape) {
  return std::to_string(shape.count) + " x " + dtypeName(shape.dtype) + " " + redOpName(shape.op);
}

}  // namespace

Status agreeOnCall(MPI_Comm comm, WaitState& wait, const CallShape& mine,
                   std::vector<int64_t>* alsoLeast) {
  std::vector<int64_t> values = {mine.count, static_cast<int64_t>(mine.dtype),
                                 static_cast<int64_t>(mine.op)};
  if (alsoLeast != nullptr) values.insert(values.end(), alsoLeast->begin(), alsoLeast->end());
  const size_t n = values.size();
  GFSHIM_RETURN_IF_ERROR(agreeLeastAndMost(
      comm, wait, {"allreduce argument check", mine.count, mine.dtype, mine.op}, values));
  if (alsoLeast != nullptr) std::copy(values.begin() + 3, values.begin() + n, alsoLeast->begin());
  const char* what[] = {"counts", "datatypes", "ops"};
  const int classes[] = {MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_OP};
  for (size_t i = 0; i < 3; ++i) {
    if (values[i] == values[n + i]) continue;
    std::string range = std::string(what[i]) + " differ across ranks";
    if (i == 0) {
      range = "counts from " + std::to_string(values[0]) + " to " + std::to_string(values[n]);
    }
    return Status::error(StatusCode::kTransportError,
                         "the ranks passed different arguments to one MPI_Allreduce (" + range +
                             "; this rank: " + describe(mine) +
                             "): an erroneous program; no data was moved",
                         classes[i]);
  }
  return Status::ok();
}

Status agreeOnRound(MPI_Comm comm, WaitState& wait, const std::vector<CallShape>& mine) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the shapes, in queue order
  auto mix = [&hash](uint64_t value) {
    for (int b = 0; b < 8; ++b) hash = (hash ^ ((value >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (const CallShape& shape : mine) {
    mix(static_cast<uint64_t>(shape.count));
    mix(static_cast<uint64_t>(shape.dtype) << 8 | static_cast<uint64_t>(shape.op));
  }
  std::vector<int64_t> values = {static_cast<int64_t>(hash >> 2)};  // negation cannot overflow
  GFSHIM_RETURN_IF_ERROR(agreeLeastAndMost(
      comm, wait, {"fusion round argument check", 0, DType::kInt64, RedOp::kMin}, values));
  if (values[0] == values[1]) return Status::ok();
  return Status::error(StatusCode::kTransportError,
                       "the ranks passed different counts, datatypes or ops to the " +
                           std::to_string(mine.size()) +
                           " MPI_Iallreduce calls of one fusion round: an erroneous program; no "
                           "data was moved",
                       MPI_ERR_COUNT);
}

}  // namespace gfshim
