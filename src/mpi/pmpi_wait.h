// The shim's waits on MPI, in one place: outside a task (common/task.h) they block as PMPI does;
// inside a task they never block, but test and yield until done, so that a task driven from the
// application's own MPI calls (GFSHIM_PROGRESS=calls) gives the thread back to the application
// while its transfers are in flight.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace gfshim {

// PMPI_Wait, or inside a task PMPI_Test until done with a yield after every miss.
int waitRequest(MPI_Request* request, MPI_Status* status);

// The minimum over the ranks of `comm` of each of `values[0..count)`, in place (every rank gets
// the same values). Outside a task: one PMPI_Allreduce. Inside a task: a dissemination over
// point-to-point messages (tag kAgreementTag), ceil(log2 p) rounds of one send and one receive,
// correct for any p because MIN is idempotent; it uses no MPI nonblocking collective, whose
// progress engine (Open MPI's libnbc) is not safe to enter from inside another progress call.
int agreeMinimum(MPI_Comm comm, int64_t* values, int count);

}  // namespace gfshim
