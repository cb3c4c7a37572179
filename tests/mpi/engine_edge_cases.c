/*
 * engine_edge_cases: behaviour around the engine that a user would notice, compared with what
 * the MPI does without the shim.
 *  1. The shim's private communicator must not run the application's attribute copy callbacks
 *     (a user MPI_Comm_dup does, which shows the callback works).
 *  2. MPI_COMM_NULL with an otherwise eligible call returns the MPI's own error class (with
 *     MPI_ERRORS_RETURN), as PMPI_Allreduce does.
 *  3. Inexact float data (every summation order gives different last bits) still ends with
 *     identical bits on every rank.
 * Run with GFSHIM_MIN_BYTES=0 so the calls reach the engine. Prints "N passed, N failed"
 * (summed over ranks) on rank 0 and exits 1 on any failure.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int copies = 0;

static int countingCopy(MPI_Comm comm, int keyval, void* extra, void* in, void* out, int* flag) {
  (void)comm, (void)keyval, (void)extra;
  copies++;
  *(void**)out = in;
  *flag = 1;
  return MPI_SUCCESS;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, passed = 0, failed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  enum { kCount = 100003 };
  float *in = malloc(sizeof(float) * kCount), *out = malloc(sizeof(float) * kCount);
  float* root = malloc(sizeof(float) * kCount);

  /* 1. attribute copy callbacks */
  int keyval;
  MPI_Comm_create_keyval(countingCopy, MPI_COMM_NULL_DELETE_FN, &keyval, NULL);
  MPI_Comm_set_attr(MPI_COMM_WORLD, keyval, &keyval);
  for (int i = 0; i < kCount; i++) in[i] = (float)(i % 7);
  MPI_Allreduce(in, out, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (copies == 0) {
    passed++;
  } else {
    failed++;
    printf("FAIL rank %d: the allreduce ran an attribute copy callback %d times\n", rank, copies);
  }
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (copies == 1) {
    passed++;
  } else {
    failed++;
    printf("FAIL rank %d: MPI_Comm_dup ran the copy callback %d times, expected 1\n", rank, copies);
  }
  MPI_Comm_free(&dup);
  MPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
  MPI_Comm_free_keyval(&keyval);

  /* 2. MPI_COMM_NULL */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int ref = PMPI_Allreduce(in, out, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_NULL);
  int got = MPI_Allreduce(in, out, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_NULL);
  int refClass = -1, gotClass = -2;
  MPI_Error_class(ref, &refClass);
  MPI_Error_class(got, &gotClass);
  if (ref != MPI_SUCCESS && refClass == gotClass) {
    passed++;
  } else {
    failed++;
    printf("FAIL rank %d: MPI_COMM_NULL gave error class %d, PMPI gives %d\n", rank, gotClass,
           refClass);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

  /* 3. identical bits with inexact data */
  for (int i = 0; i < kCount; i++)
    in[i] = 0.1f * (float)i + 1e-7f * (float)rank + 0.3f / (float)(rank + 1);
  MPI_Allreduce(in, out, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  memcpy(root, out, sizeof(float) * kCount);
  PMPI_Bcast(root, kCount, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (memcmp(root, out, sizeof(float) * kCount) == 0) {
    passed++;
  } else {
    failed++;
    printf("FAIL rank %d: result bits differ from rank 0's\n", rank);
  }

  int local[2] = {passed, failed}, total[2];
  PMPI_Reduce(local, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", total[0], total[1]);
  free(in);
  free(out);
  free(root);
  MPI_Finalize();
  return failed ? 1 : 0;
}
