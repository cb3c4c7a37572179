// The shim's waits on MPI, in one place: outside a task (common/task.h) they block as PMPI does;
// inside a task they never block, but test and yield until done, so that a task driven from the
// application's own MPI calls (GFSHIM_PROGRESS=calls) gives the thread back to the application
// while its transfers are in flight.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace gfshim {

// PMPI_Wait, or inside a task PMPI_Test until done with a yield after every miss. A miss inside a
// task parks the wait in the thread's current ParkedWaits (ParkedWaits::Driving), if any.
int waitRequest(MPI_Request* request, MPI_Status* status);

// The transfers the tasks of one driver wait for, so that a driver with nothing else to do can
// block in the MPI until one completes instead of resuming every task to test again. Polling
// costs a real rank a core that its peers on the same node may need, and a simulated rank one
// SMPI event per test plus, under SimGrid 3.32, a transfer left for good in its activity list
// (see pmpi_wait.cpp, mayTest; bench/RESULTS.md, "Lazy fusion against per-tensor allreduces,
// simulated").
class ParkedWaits {
 public:
  // While alive, the waits that miss inside tasks this thread resumes park in `waits`.
  class Driving {
   public:
    explicit Driving(ParkedWaits* waits);
    ~Driving();
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    ParkedWaits* outer_;
  };

  // While alive, the blocking driver resumes tasks on this thread: under SimGrid SMPI their waits
  // do not test (see pmpi_wait.cpp, mayTest) but leave every transfer to blockUntilOneCompletes.
  class LeftToBlocking {
   public:
    LeftToBlocking();
    ~LeftToBlocking();
    LeftToBlocking(const LeftToBlocking&) = delete;
    LeftToBlocking& operator=(const LeftToBlocking&) = delete;

   private:
    bool outer_;
  };

  // Counts the waits inside tasks that started or completed, in every ParkedWaits: unchanged over
  // a pass that resumed every task means each of them only tested a transfer still in flight, so
  // none can advance before one of the parked transfers completes.
  static uint64_t events();

  // Blocks in PMPI_Waitany until one of the transfers parked in any of `drivers` completes, and
  // completes it for its task (whose next resume returns from the wait). Returns the index in
  // `drivers` of the one whose wait completed, or -1 at once when none is parked. The caller
  // holds every task of `drivers` (nobody resumes them meanwhile).
  static int blockUntilOneCompletes(const std::vector<ParkedWaits*>& drivers);

  struct Parked;  // pmpi_wait.cpp

 private:
  friend int waitRequest(MPI_Request* request, MPI_Status* status);
  std::mutex mutex_;
  std::vector<Parked*> parked_;
};

// The minimum over the ranks of `comm` of each of `values[0..count)`, in place (every rank gets
// the same values). Outside a task: one PMPI_Allreduce. Inside a task: a dissemination over
// point-to-point messages (tag kAgreementTag), ceil(log2 p) rounds of one send and one receive,
// correct for any p because MIN is idempotent; it uses no MPI nonblocking collective, whose
// progress engine (Open MPI's libnbc) is not safe to enter from inside another progress call.
int agreeMinimum(MPI_Comm comm, int64_t* values, int count);

}  // namespace gfshim
