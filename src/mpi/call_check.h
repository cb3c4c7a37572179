// GFSHIM_CHECK_CALLS: before the engine runs a blocking call, or a fusion round's operations, the
// ranks agree that they all passed the same arguments (count, datatype, op) -- one small
// PMPI_Allreduce. MPI calls a mismatch erroneous and leaves the outcome open (a native MPI may
// truncate, return garbage or hang); in the engine it would mean different schedules on different
// ranks. With the check every rank sees the mismatch in the same agreement and reports it through
// its error handler before any transfer, so none is left waiting and no buffer is written.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "mpi/stall_inspector.h"

namespace gfshim {

// The agreement the checks below and the fusion rounds run: one PMPI_Allreduce (MIN over
// [v..., -v...]) of `values` on `comm`, after which values[i] holds the least and values[n + i]
// the largest of entry i over the ranks (n entries in, 2n out). The collective is where a rank
// waits for late peers, so it counts as operation `label` of `wait` (the wait state of the
// transport on `comm`) for the stall inspector.
Status agreeLeastAndMost(MPI_Comm comm, WaitState& wait, const OperationLabel& label,
                         std::vector<int64_t>& values);

// The arguments of one operation, as they enter the agreement.
struct CallShape {
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
};

// Collective over `comm`. Ok when every rank passed `mine`; otherwise an error (MPI_ERR_COUNT,
// MPI_ERR_TYPE or MPI_ERR_OP) that names this rank's arguments and the range seen across ranks.
// `alsoLeast` (may be null) rides in the same allreduce: on return each entry holds its least
// over the ranks (the blocking hook's GPU route vote, so a call makes one agreement, not two).
Status agreeOnCall(MPI_Comm comm, WaitState& wait, const CallShape& mine,
                   std::vector<int64_t>* alsoLeast);

// The same for the operations a fusion round takes (every rank takes the same number): one hash
// of their arguments, so a mismatch anywhere in the round fails the round on every rank.
Status agreeOnRound(MPI_Comm comm, WaitState& wait, const std::vector<CallShape>& mine);

}  // namespace gfshim
