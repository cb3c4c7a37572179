/* What a request costs the lazy allreduce: start, complete and wait one generalized request
 * (MPI_Grequest_start, the mechanism the shim uses), against a native nonblocking collective on
 * MPI_COMM_SELF (MPI_Iallreduce of one int + MPI_Wait, the cheapest native request with a
 * comparable life cycle). With MPICH also MPIX_Grequest_start, the variant with a poll callback.
 * Single process; prints nanoseconds per request, median of 7 runs of 100000.
 * usage: request_cost
 */
#include <mpi.h>
#include <stdio.h>

enum { kRequests = 100000, kRuns = 7 };

static int query(void* state, MPI_Status* status) {
  (void)state;
  MPI_Status_set_elements(status, MPI_BYTE, 0);
  MPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
static int release(void* state) { (void)state; return MPI_SUCCESS; }
static int cancel(void* state, int complete) { (void)state; (void)complete; return MPI_SUCCESS; }

#ifdef MPICH
static int poll(void* state, MPI_Status* status) { (void)state; (void)status; return MPI_SUCCESS; }
static int waitAll(int count, void** states, double timeout, MPI_Status* status) {
  (void)count; (void)states; (void)timeout; (void)status;
  return MPI_SUCCESS;
}
#endif

static double median(double* v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j] < v[j - 1]; --j) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return v[n / 2];
}

static double timeGrequest(int extended) {
  double runs[kRuns];
  for (int run = 0; run < kRuns; ++run) {
    const double start = MPI_Wtime();
    for (int i = 0; i < kRequests; ++i) {
      MPI_Request request;
#ifdef MPICH
      if (extended) {
        MPIX_Grequest_start(query, release, cancel, poll, waitAll, NULL, &request);
      } else
#endif
      {
        (void)extended;
        MPI_Grequest_start(query, release, cancel, NULL, &request);
      }
      MPI_Grequest_complete(request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    runs[run] = (MPI_Wtime() - start) / kRequests * 1e9;
  }
  return median(runs, kRuns);
}

static double timeNative(void) {
  double runs[kRuns];
  int in = 1, out = 0;
  for (int run = 0; run < kRuns; ++run) {
    const double start = MPI_Wtime();
    for (int i = 0; i < kRequests; ++i) {
      MPI_Request request;
      PMPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF, &request);
      PMPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    runs[run] = (MPI_Wtime() - start) / kRequests * 1e9;
  }
  return median(runs, kRuns);
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  printf("# request_cost: ns per request (start, complete, wait), median of %d x %d, thread level %d\n",
         kRuns, kRequests, provided);
  printf("MPI_Grequest_start              %8.0f ns\n", timeGrequest(0));
#ifdef MPICH
  printf("MPIX_Grequest_start (poll fn)   %8.0f ns\n", timeGrequest(1));
#endif
  printf("PMPI_Iallreduce on MPI_COMM_SELF %7.0f ns\n", timeNative());
  MPI_Finalize();
  return 0;
}
