/*
 * tool_stack: the calls a PMPI tool stacked with the shim should see. Makes `small` tiny
 * MPI_Allreduce calls (the shim passes them through), `small` tiny MPI_Iallreduce calls completed
 * with MPI_Wait (passed through too), and `large` 4 MiB MPI_Allreduce calls (the shim's engine
 * runs them under GFSHIM_ALGO=ring), checks every result exactly, and prints
 *
 *   tool_stack: rank R: S small + S small nonblocking + L large allreduces, all correct
 *
 * usage: tool_stack [small] [large]      (defaults 7 and 3)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { kLargeCount = 1 << 20 };

int main(int argc, char** argv) {
  const int small = argc > 1 ? atoi(argv[1]) : 7;
  const int large = argc > 2 ? atoi(argv[2]) : 3;
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int wrong = 0;
  for (int i = 0; i < small; i++) {
    int in[4] = {rank, i, 1, -rank}, out[4];
    MPI_Allreduce(in, out, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const int ranks = size * (size - 1) / 2;
    if (out[0] != ranks || out[1] != i * size || out[2] != size || out[3] != -ranks) wrong++;
  }
  for (int i = 0; i < small; i++) {
    int in = rank + i, out = -1;
    MPI_Request request;
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    if (out != size - 1 + i) wrong++;
  }
  int* in = malloc(sizeof(int) * kLargeCount);
  int* out = malloc(sizeof(int) * kLargeCount);
  for (int call = 0; call < large; call++) {
    for (int i = 0; i < kLargeCount; i++) in[i] = (i % 1000) * (rank + 1) + call;
    MPI_Allreduce(in, out, kLargeCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const int factor = size * (size + 1) / 2;
    for (int i = 0; i < kLargeCount; i++) {
      if (out[i] != (i % 1000) * factor + call * size) {
        wrong++;
        break;
      }
    }
  }
  free(in);
  free(out);
  if (wrong == 0) {
    printf("tool_stack: rank %d: %d small + %d small nonblocking + %d large allreduces, all correct\n",
           rank, small, small, large);
  } else {
    printf("tool_stack: rank %d: WRONG results in %d calls\n", rank, wrong);
  }
  fflush(stdout);
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}
