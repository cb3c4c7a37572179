/* The thread level the application sees under the shim. With fusion on, the shim asks the MPI
 * for MPI_THREAD_MULTIPLE (for its progress threads); the application must still be given, by
 * MPI_Init_thread and by MPI_Query_thread, the level it asked for (capped by what the MPI
 * offers), and MPI_THREAD_SINGLE after MPI_Init.
 *
 * usage: thread_level init | single | funneled | serialized | multiple
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "init";
  int required = -1, provided = -1, queried = -1;
  if (strcmp(how, "init") == 0) {
    MPI_Init(&argc, &argv);
  } else {
    required = strcmp(how, "single") == 0       ? MPI_THREAD_SINGLE
               : strcmp(how, "funneled") == 0   ? MPI_THREAD_FUNNELED
               : strcmp(how, "serialized") == 0 ? MPI_THREAD_SERIALIZED
                                                : MPI_THREAD_MULTIPLE;
    MPI_Init_thread(&argc, &argv, required, &provided);
  }
  MPI_Query_thread(&queried);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int expected = required < 0 ? MPI_THREAD_SINGLE : required;
  const int ok = queried == expected && (required < 0 || provided == expected);
  if (rank == 0) {
    printf("thread level %s: provided %d, MPI_Query_thread %d, expected %d: %s\n", how, provided,
           queried, expected, ok ? "ok" : "WRONG");
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
