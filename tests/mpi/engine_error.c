/*
 * engine_error: an MPI error inside the shim's engine reaches the application through the
 * communicator's error handler. Sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, makes one 4 MiB
 * MPI_Allreduce (the engine runs it under GFSHIM_MIN_BYTES=0 GFSHIM_ALGO=ring; a fault injector
 * makes one of its PMPI calls fail), and prints the returned code's class and string:
 *
 *   engine_error: rank R: MPI_Allreduce returned class C (same as MPI_ERR_OTHER: yes): <string>
 *
 * Mode "abort": a rank that got an error calls MPI_Abort (its peers wait for its data).
 * Mode "continue": every rank is expected to fail (the injector fails them all before anything
 * is sent); each then makes a second allreduce on MPI_COMM_WORLD, which must fail too (the
 * communicator's state is unusable), and finalizes normally.
 *
 * usage: engine_error abort|continue
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abort_after_output.h"

enum { kCount = 1 << 20 };

static int report(int rank, const char* what, int rc) {
  int errorClass = -1, length = 0;
  char text[MPI_MAX_ERROR_STRING] = "";
  MPI_Error_class(rc, &errorClass);
  MPI_Error_string(rc, text, &length);
  printf("engine_error: rank %d: %s returned class %d (same as MPI_ERR_OTHER: %s): %s\n", rank,
         what, errorClass, errorClass == MPI_ERR_OTHER ? "yes" : "no", text);
  fflush(stdout);
  return errorClass;
}

int main(int argc, char** argv) {
  const int abortOnError = argc < 2 || strcmp(argv[1], "continue") != 0;
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int* in = malloc(sizeof(int) * kCount);
  int* out = malloc(sizeof(int) * kCount);
  for (int i = 0; i < kCount; i++) in[i] = i;
  int rc = MPI_Allreduce(in, out, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) {
    printf("engine_error: rank %d: MPI_Allreduce succeeded\n", rank);
    fflush(stdout);
  } else {
    report(rank, "MPI_Allreduce", rc);
    if (abortOnError) {
      printf("engine_error: rank %d calls MPI_Abort\n", rank);
      abortAfterOutput(MPI_COMM_WORLD, 3);
    }
    rc = MPI_Allreduce(in, out, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) {
      printf("engine_error: rank %d: second MPI_Allreduce succeeded\n", rank);
    } else {
      report(rank, "second MPI_Allreduce", rc);
    }
  }
  free(in);
  free(out);
  MPI_Finalize();
  printf("engine_error: rank %d finalized\n", rank);
  fflush(stdout);
  return 0;
}
