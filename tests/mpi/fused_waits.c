/* The application's waits on fused MPI_Iallreduces with progress in calls (run with
 * GFSHIM_PROGRESS=calls, GFSHIM_FUSION_MIN_BYTES=0).
 *
 * Bursts: each rank posts 16 MPI_Iallreduces (1K-64K floats, exact sums) and completes them with
 * MPI_Waitall, MPI_Wait one by one or MPI_Waitany, in turn. Every request waited on is a fused
 * operation's, so a rank whose fused rounds all wait for transfers blocks in the MPI until one
 * completes (the report's "times blocked in the MPI") instead of polling.
 *
 * Mixed: rank 0 waits with MPI_Waitany on a fused operation and on a receive from rank 1, which
 * rank 1 sends only after 300 ms, then blocks in MPI_Recv for rank 0's answer before it waits for
 * its own fused operation. The receive can complete while the fused operation cannot (rank 1 is
 * in MPI_Recv: with MPICH, which has no progress hook, nothing progresses its fused round), so
 * rank 0 must keep polling its application's request rather than block for the shim's transfers:
 * blocking there never returns, and the alarm ends the run.
 *
 * usage: fused_waits [bursts]
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kCalls = 16, kMaxCount = 65536, kTimeLimitSeconds = 120 };

static float buffers[kCalls][kMaxCount];

static void onAlarm(int signal) {
  (void)signal;
  static const char message[] = "fused_waits: no progress in 120 s (deadlock)\n";
  if (write(STDERR_FILENO, message, sizeof(message) - 1) < 0) _exit(3);
  _exit(2);
}

static int countOf(int call) { return 1024 << (call % 7); }  /* 1K..64K floats */

static void fill(int burst, int call, int rank, int count) {
  for (int i = 0; i < count; ++i) buffers[call][i] = (float)((burst + call + i + rank) % 13);
}

static int checkSums(int burst, int call, int size, int count) {
  for (int i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < size; ++r) expected += (float)((burst + call + i + r) % 13);
    if (buffers[call][i] != expected) return 0;
  }
  return 1;
}

static void completeBurst(int how, MPI_Request* requests) {
  if (how == 0) {
    MPI_Status statuses[kCalls];
    MPI_Waitall(kCalls, requests, statuses);
  } else if (how == 1) {
    for (int call = kCalls - 1; call >= 0; --call) MPI_Wait(&requests[call], MPI_STATUS_IGNORE);
  } else {
    for (int done = 0; done < kCalls; ++done) {
      int index = MPI_UNDEFINED;
      MPI_Waitany(kCalls, requests, &index, MPI_STATUS_IGNORE);
    }
  }
}

/* Returns 1 when rank 0's fused operation and point-to-point exchange completed right. */
static int mixedWaitany(int rank, int size) {
  static float fused[kMaxCount];
  for (int i = 0; i < kMaxCount; ++i) fused[i] = (float)(rank + 1);
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Iallreduce(MPI_IN_PLACE, fused, kMaxCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &requests[0]);
  int message = 0, answer = 0;
  if (rank == 0) {
    MPI_Irecv(&message, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &requests[1]);
    for (int index = 0; index != 1;) MPI_Waitany(2, requests, &index, MPI_STATUS_IGNORE);
    answer = message + 1;
    MPI_Send(&answer, 1, MPI_INT, 1, 8, MPI_COMM_WORLD);
  } else if (rank == 1) {
    usleep(300 * 1000);
    message = 41;
    MPI_Send(&message, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    MPI_Recv(&answer, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
  const float expected = (float)(size * (size + 1) / 2);
  for (int i = 0; i < kMaxCount; ++i) {
    if (fused[i] != expected) return 0;
  }
  return rank > 1 || answer == 42;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "fused_waits: needs 2 ranks or more\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int bursts = argc > 1 ? atoi(argv[1]) : 30;
  signal(SIGALRM, onAlarm);
  alarm(kTimeLimitSeconds);

  int wrong = 0;
  MPI_Request requests[kCalls];
  for (int burst = 0; burst < bursts; ++burst) {
    for (int call = 0; call < kCalls; ++call) {
      fill(burst, call, rank, countOf(call));
      MPI_Iallreduce(MPI_IN_PLACE, buffers[call], countOf(call), MPI_FLOAT, MPI_SUM,
                     MPI_COMM_WORLD, &requests[call]);
    }
    completeBurst(burst % 3, requests);
    for (int call = 0; call < kCalls; ++call) {
      if (!checkSums(burst, call, size, countOf(call))) ++wrong;
    }
  }
  const int mixedOk = mixedWaitany(rank, size);
  alarm(0);
  printf("fused_waits: rank %d: %d bursts of %d (Waitall, Wait, Waitany): %d wrong; "
         "mixed Waitany: %s\n",
         rank, bursts, kCalls, wrong, mixedOk ? "correct" : "WRONG");
  fflush(stdout);
  MPI_Finalize();
  return wrong == 0 && mixedOk ? 0 : 1;
}
