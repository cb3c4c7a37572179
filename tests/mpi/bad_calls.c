/* Erroneous and extreme calls a user may make, run under the shim (docs/bad-input.md's
 * catalogue). usage: bad_calls MODE
 *   zero-null          count 0 with NULL buffers (blocking and nonblocking): MPI_SUCCESS, as the
 *                      MPI gives
 *   mismatched-counts-blocking, mismatched-counts-fused
 *                      rank 2 passes twice the count of the others (erroneous) to MPI_Allreduce /
 *                      MPI_Iallreduce: with MPI_ERRORS_RETURN every rank gets an error, nothing is
 *                      written, and a correct MPI_Allreduce afterwards works
 *   mismatched-counts-unchecked
 *                      the same under GFSHIM_CHECK_CALLS=0: the rank that notices aborts
 *   huge               one in-place MPI_SUM of 600 M floats (2.4 GB, more bytes than INT_MAX)
 * Prints "bad_calls: MODE passed" on rank 0 when the outcome is the expected one.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abort_after_output.h"

static int rank, size;

static int zeroNull(void) {
  int rc = MPI_Allreduce(NULL, NULL, 0, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Request request;
  int irc = MPI_Iallreduce(NULL, NULL, 0, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  if (irc == MPI_SUCCESS) irc = MPI_Wait(&request, MPI_STATUS_IGNORE);
  int inPlace = MPI_Allreduce(MPI_IN_PLACE, NULL, 0, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS && irc == MPI_SUCCESS && inPlace == MPI_SUCCESS;
}

static void printError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0, errorClass = 0;
  MPI_Error_class(rc, &errorClass);
  MPI_Error_string(rc, text, &length);
  printf("bad_calls: rank %d got error class %d (%s): %s\n", rank, errorClass,
         errorClass == MPI_ERR_COUNT ? "MPI_ERR_COUNT" : "other", text);
  fflush(stdout);
}

/* Checked (GFSHIM_CHECK_CALLS=1): every rank gets the error, and a correct call afterwards works. */
static int mismatchedCounts(int fused) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int count = (1 << 18) * (rank == 2 ? 2 : 1);
  float* data = calloc((size_t)count, sizeof(float));
  int rc;
  if (fused) {
    MPI_Request request;
    rc = MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
  } else {
    rc = MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  int ok = rc != MPI_SUCCESS;
  if (ok) {
    printError(rc);
  } else {
    printf("bad_calls: rank %d got no error from mismatched counts\n", rank);
  }
  for (int i = 0; i < count; ++i) ok = ok && data[i] == 0; /* nothing was written */
  for (int i = 0; i < (1 << 18); ++i) data[i] = (float)rank;
  rc = MPI_Allreduce(MPI_IN_PLACE, data, 1 << 18, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  ok = ok && rc == MPI_SUCCESS && data[7] == (float)(size * (size - 1) / 2);
  free(data);
  return ok;
}

/* Unchecked (GFSHIM_CHECK_CALLS=0): the schedules differ; the rank that notices aborts. */
static void mismatchedCountsUnchecked(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int count = (1 << 20) * (1 + rank % 2);
  float* data = calloc((size_t)count, sizeof(float));
  for (int call = 0; call < 2; ++call) {
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data, call == 0 ? count : 1, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      printError(rc);
      abortAfterOutput(MPI_COMM_WORLD, 3);
    }
  }
  free(data);
}

static int huge(void) {
  const size_t count = 600000000;
  float* data = malloc(count * sizeof(float));
  if (data == NULL) return 0;
  for (size_t i = 0; i < count; ++i) data[i] = (float)(i % 1024);
  const int rc = MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int ok = rc == MPI_SUCCESS;
  for (size_t i = 0; i < count && ok; i += 999983) ok = data[i] == (float)size * (float)(i % 1024);
  ok = ok && data[count - 1] == (float)size * (float)((count - 1) % 1024);
  free(data);
  return ok;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mode = argc > 1 ? argv[1] : "";
  int ok = 0;
  if (strcmp(mode, "zero-null") == 0) {
    ok = zeroNull();
  } else if (strcmp(mode, "mismatched-counts-blocking") == 0) {
    ok = mismatchedCounts(0);
  } else if (strcmp(mode, "mismatched-counts-fused") == 0) {
    ok = mismatchedCounts(1);
  } else if (strcmp(mode, "mismatched-counts-unchecked") == 0) {
    mismatchedCountsUnchecked();
  } else if (strcmp(mode, "huge") == 0) {
    ok = huge();
  } else {
    if (rank == 0) {
      fprintf(stderr, "usage: bad_calls zero-null|mismatched-counts-{blocking,fused,unchecked}|huge\n");
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("bad_calls: %s %s\n", mode, ok ? "passed" : "FAILED");
  MPI_Finalize();
  return ok ? 0 : 1;
}
