/* A rank that joins late: the stall inspector (GFSHIM_STALL_WARN_SEC) of the ranks waiting for it
 * names the operation and the late rank. Run under the shim.
 *
 * usage: stall blocking|fused LATE_RANK SECONDS
 * Every rank runs two large MPI_Allreduce calls (blocking) or bursts of MPI_Iallreduce + Waitall
 * (fused); before the second one, LATE_RANK sleeps SECONDS outside MPI. The results are checked.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kCount = 1 << 20, kBurst = 8 };

static int check(const float* data, int count, int size) {
  for (int i = 0; i < count; ++i) {
    if (data[i] != (float)size * (float)(i % 7)) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int provided, rank, size, bad = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4) {
    if (rank == 0) fprintf(stderr, "usage: stall blocking|fused LATE_RANK SECONDS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int fused = strcmp(argv[1], "fused") == 0;
  const int late = atoi(argv[2]);
  const int seconds = atoi(argv[3]);
  const int count = fused ? kCount / kBurst : kCount;
  float* data = malloc(sizeof(float) * (size_t)kCount * kBurst);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < count * kBurst; ++i) data[i] = (float)(i % count % 7);
    if (round == 1 && rank == late) sleep((unsigned)seconds);
    if (fused) {
      MPI_Request requests[kBurst];
      for (int b = 0; b < kBurst; ++b) {
        MPI_Iallreduce(MPI_IN_PLACE, data + (size_t)b * count, count, MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &requests[b]);
      }
      MPI_Waitall(kBurst, requests, MPI_STATUSES_IGNORE);
      for (int b = 0; b < kBurst; ++b) bad |= check(data + (size_t)b * count, count, size);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      bad |= check(data, count, size);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("stall: %s results %s\n", argv[1], bad ? "WRONG" : "correct");
  free(data);
  MPI_Finalize();
  return bad;
}
