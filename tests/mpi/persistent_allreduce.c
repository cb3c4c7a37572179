/*
 * persistent_allreduce: MPI-4's persistent allreduce (MPI_Allreduce_init; Open MPI 4.1 has it as
 * MPIX_Allreduce_init) under the shim, which does not intercept it (docs/limitations.md):
 * the request is started six times with new inputs, each time between a blocking MPI_Allreduce
 * and a burst of MPI_Iallreduce calls that the shim runs on the same communicator, and every
 * result is compared with the exact integer sum. Prints "persistent_allreduce: N checks passed,
 * M failed" (summed over ranks) on rank 0 and exits 1 on any failure.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h>
#define ALLREDUCE_INIT MPIX_Allreduce_init
#else
#define ALLREDUCE_INIT MPI_Allreduce_init
#endif

enum { kCount = 1 << 18, kStarts = 6, kBurst = 4 };

static int checkSum(const int* got, int round, int size, int salt) {
  for (int i = 0; i < kCount; ++i) {
    /* rank r contributes r + i + salt * round: the sum is known in closed form */
    const long want = (long)size * (size - 1) / 2 + (long)size * (i + salt * round);
    if (got[i] != (int)want) return 0;
  }
  return 1;
}

static void fill(int* buffer, int rank, int round, int salt) {
  for (int i = 0; i < kCount; ++i) buffer[i] = rank + i + salt * round;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, passed = 0, failed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int* persistentIn = malloc(sizeof(int) * kCount);
  int* persistentOut = malloc(sizeof(int) * kCount);
  int* blocking = malloc(sizeof(int) * kCount);
  int* burst = malloc(sizeof(int) * kCount * kBurst);
  MPI_Request persistent;
  ALLREDUCE_INIT(persistentIn, persistentOut, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                 MPI_INFO_NULL, &persistent);
  for (int round = 0; round < kStarts; ++round) {
    fill(blocking, rank, round, 3);
    MPI_Allreduce(MPI_IN_PLACE, blocking, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    checkSum(blocking, round, size, 3) ? ++passed : ++failed;

    fill(persistentIn, rank, round, 7);
    MPI_Start(&persistent);
    MPI_Request requests[kBurst];
    MPI_Status statuses[kBurst];
    for (int b = 0; b < kBurst; ++b) {
      fill(burst + (size_t)b * kCount, rank, round, 11 + b);
      MPI_Iallreduce(MPI_IN_PLACE, burst + (size_t)b * kCount, kCount, MPI_INT, MPI_SUM,
                     MPI_COMM_WORLD, &requests[b]);
    }
    /* the persistent request first, then the burst: either order must complete */
    MPI_Wait(&persistent, MPI_STATUS_IGNORE);
    MPI_Waitall(kBurst, requests, statuses);
    checkSum(persistentOut, round, size, 7) ? ++passed : ++failed;
    for (int b = 0; b < kBurst; ++b) {
      checkSum(burst + (size_t)b * kCount, round, size, 11 + b) ? ++passed : ++failed;
    }
  }
  MPI_Request_free(&persistent);
  int counts[2] = {passed, failed}, totals[2];
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("persistent_allreduce: %d checks passed, %d failed\n", totals[0], totals[1]);
  }
  free(persistentIn), free(persistentOut), free(blocking), free(burst);
  MPI_Finalize();
  return totals[1] == 0 || rank != 0 ? 0 : 1;
}
