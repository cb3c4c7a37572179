/* Rank 1 leaves after MPI_Init and a barrier without calling MPI_Finalize; the others finalize.
 * Open MPI's launcher then reports "rank 1 with PID 0 ... exiting improperly", the report that
 * run_with_shim.sh reruns once (its launcher's finalize race looks the same): the harness test
 * checks that it reruns, and that a real missing MPI_Finalize still fails. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) exit(0);
  MPI_Finalize();
  return 0;
}
