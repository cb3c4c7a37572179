/* A rank killed in the middle of an allreduce: the job must end through the MPI's own abort
 * path (non-zero exit, "mpirun noticed ... signal 9" / hydra's "BAD TERMINATION"), never hang.
 *
 * A plain MPI program (it knows nothing of the shim). Every rank runs a few timed warm-up
 * operations, then goes on; at operation KILL_AT the victim rank starts a helper thread that
 * sleeps FRACTION of the median warm-up time and then raises SIGKILL, but only while the victim
 * is inside an operation (if it is between two at that moment, the thread waits until it has
 * been inside the next one for 1 ms). Every rank announces operation KILL_AT and then meets the
 * others in an MPI_Barrier before starting it, so no peer can still be in an earlier operation
 * when the victim's clock starts. From operation KILL_AT on, every rank prints when it
 * entered and returned from each operation (CLOCK_REALTIME seconds), and the victim prints when
 * it killed itself and in which operation, so a test can check that every rank was inside an
 * allreduce when the victim died.
 *
 *   blocking: each operation is one MPI_Allreduce of BYTES of floats (the engine path when the
 *             shim takes it, e.g. GFSHIM_MIN_BYTES=0 GFSHIM_ALGO=ring)
 *   fused:    each operation is a burst of 16 MPI_Iallreduce of different sizes (BYTES in all)
 *             completed with one MPI_Waitall (the shim's lazy-fusion path)
 *
 * usage: rank_killed blocking|fused VICTIM [BYTES] [KILL_AT] [FRACTION]
 *   VICTIM -1: nobody dies and KILL_AT + 1 operations run to the end (shows the path taken)
 *   defaults: BYTES 8388608, KILL_AT 5 (warm-up operations 0..KILL_AT-1), FRACTION 0.3
 * A safety alarm ends a rank with exit code 3 after 300 s (so a hang cannot run forever even
 * outside a test harness; tests bound the run much tighter with `timeout`).
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kBurst = 16, kSafetySeconds = 300 };

static int rank, size;
static double killDelay;   /* seconds after entering operation KILL_AT */
static int killAt;
/* the victim's current operation: its index while inside, -1 between operations */
static atomic_int insideOp = -1;
static _Atomic double enteredAt;  /* CLOCK_MONOTONIC seconds */

static double realNow(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double monoNow(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void onAlarm(int sig) {
  (void)sig;
  static const char msg[] = "rank_killed: safety alarm: still running after 300 s\n";
  write(2, msg, sizeof msg - 1);
  _exit(3);
}

/* The victim's executioner: sleeps, waits until the victim is inside an operation, announces,
 * and kills the whole process. */
static void* executioner(void* arg) {
  (void)arg;
  struct timespec d;
  d.tv_sec = (time_t)killDelay;
  d.tv_nsec = (long)((killDelay - (double)d.tv_sec) * 1e9);
  while (nanosleep(&d, &d) != 0) {
  }
  int op;
  for (;;) {
    op = atomic_load(&insideOp);
    if (op >= 0 && monoNow() - atomic_load(&enteredAt) >= 1e-3 && atomic_load(&insideOp) == op) break;
    usleep(100);
  }
  char line[200];
  const int n = snprintf(line, sizeof line,
                         "rank_killed: victim rank %d raises SIGKILL at %.6f inside operation %d "
                         "(%.1f ms into it)\n",
                         rank, realNow(), op, (monoNow() - atomic_load(&enteredAt)) * 1e3);
  write(1, line, (size_t)n);
  raise(SIGKILL);
  return NULL;
}

static int cmpDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "blocking") != 0 && strcmp(argv[1], "fused") != 0)) {
    fprintf(stderr, "usage: rank_killed blocking|fused VICTIM [BYTES] [KILL_AT] [FRACTION]\n");
    return 2;
  }
  const int fused = strcmp(argv[1], "fused") == 0;
  const int victim = atoi(argv[2]);
  const size_t bytes = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)8 << 20;
  killAt = argc > 4 ? atoi(argv[4]) : 5;
  const double fraction = argc > 5 ? atof(argv[5]) : 0.3;
  if (killAt < 1 || bytes < 4 * kBurst) {
    fprintf(stderr, "rank_killed: KILL_AT must be >= 1 and BYTES >= %d\n", 4 * kBurst);
    return 2;
  }
  signal(SIGALRM, onAlarm);
  alarm(kSafetySeconds);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  /* One buffer split into kBurst pieces of different sizes (fused) or used whole (blocking). */
  const int total = (int)(bytes / sizeof(float));
  float* send = malloc((size_t)total * sizeof(float));
  float* recv = malloc((size_t)total * sizeof(float));
  if (!send || !recv) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
  for (int i = 0; i < total; ++i) send[i] = (float)((rank + i) % 17);
  int offsets[kBurst + 1];
  {  /* piece k has weight k+1 */
    const int weights = kBurst * (kBurst + 1) / 2;
    offsets[0] = 0;
    for (int k = 0; k < kBurst; ++k) offsets[k + 1] = offsets[k] + (int)((long long)total * (k + 1) / weights);
    offsets[kBurst] = total;
  }

  const int operations = victim < 0 ? killAt + 1 : killAt + 1000;  /* the victim ends it */
  double times[64];
  int timed = 0;
  for (int op = 0; op < operations; ++op) {
    if (op == killAt && timed > 0) {
      qsort(times, (size_t)timed, sizeof times[0], cmpDouble);
      killDelay = fraction * times[timed / 2];
    }
    if (op >= killAt) {
      printf("rank_killed: rank %d entered operation %d at %.6f (median warm-up %.1f ms)\n", rank,
             op, realNow(), timed ? times[timed / 2] * 1e3 : 0.0);
      fflush(stdout);
    }
    /* Every peer has announced operation KILL_AT before the victim starts its clock: without this
     * barrier a loaded machine let the victim (done early with operation KILL_AT-1, as a ring
     * allows) die before a descheduled peer had printed its entry, and the kill could not be
     * shown to have happened while the peers waited for it. */
    if (op == killAt) MPI_Barrier(MPI_COMM_WORLD);
    const double start = monoNow();
    atomic_store(&enteredAt, start);
    atomic_store(&insideOp, op);
    if (op == killAt && rank == victim) {
      pthread_t thread;
      if (pthread_create(&thread, NULL, executioner, NULL) != 0) {
        fprintf(stderr, "rank_killed: pthread_create failed\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
    }
    if (!fused) {
      MPI_Allreduce(send, recv, total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Request requests[kBurst];
      for (int k = 0; k < kBurst; ++k) {
        MPI_Iallreduce(send + offsets[k], recv + offsets[k], offsets[k + 1] - offsets[k], MPI_FLOAT,
                       MPI_SUM, MPI_COMM_WORLD, &requests[k]);
      }
      static MPI_Status statuses[kBurst];  /* not MPI_STATUSES_IGNORE (gcc + MPICH warning) */
      MPI_Waitall(kBurst, requests, statuses);
    }
    atomic_store(&insideOp, -1);
    const double took = monoNow() - start;
    if (op < killAt && timed < 64) times[timed++] = took;
    if (op >= killAt) {
      printf("rank_killed: rank %d returned from operation %d at %.6f after %.1f ms\n", rank, op,
             realNow(), took * 1e3);
      fflush(stdout);
    }
    /* check the sum: element i is sum over ranks r of (r + i) % 17 */
    for (int i = 0; i < total; i += 4099) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += (float)((r + i) % 17);
      if (recv[i] != want) {
        fprintf(stderr, "rank_killed: [%d] operation %d element %d: got %g want %g\n", rank, op, i,
                (double)recv[i], (double)want);
        MPI_Abort(MPI_COMM_WORLD, 4);
      }
    }
  }
  if (rank == 0) printf("rank_killed: %s: %d operations of %zu bytes completed\n", argv[1], operations, bytes);
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
