/* Fused MPI_Iallreduces still pending when their communicator is freed or MPI_Finalize is
 * called (their requests freed with MPI_Request_free, which the shim's requests allow): the shim
 * completes them first, so their results are there afterwards and nothing hangs.
 * usage: fusion_pending
 */
#include <mpi.h>
#include <stdio.h>

enum { kCount = 100000 };

static float onDup[kCount], onWorld[kCount];

static int sumsAre(const float* values, float expected) {
  for (int i = 0; i < kCount; ++i) {
    if (values[i] != expected) return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  for (int i = 0; i < kCount; ++i) onDup[i] = onWorld[i] = (float)(rank + 1);
  const float expected = (float)(size * (size + 1) / 2);

  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, onDup, kCount, MPI_FLOAT, MPI_SUM, dup, &request);
  MPI_Request_free(&request);
  MPI_Comm_free(&dup);  /* completes the pending call first */
  const int dupOk = sumsAre(onDup, expected);

  MPI_Iallreduce(MPI_IN_PLACE, onWorld, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  MPI_Request_free(&request);
  MPI_Finalize();  /* completes the pending call first */
  const int worldOk = sumsAre(onWorld, expected);
  printf("[%d] pending at MPI_Comm_free: %s; pending at MPI_Finalize: %s\n", rank,
         dupOk ? "completed" : "WRONG", worldOk ? "completed" : "WRONG");
  return dupOk && worldOk ? 0 : 1;
}
