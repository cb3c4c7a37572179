/*
 * bigcount_api: MPI_Allreduce_c and MPI_Iallreduce_c (MPI 4.0 large-count variants, MPICH 4)
 * through the shim, compared with PMPI_Allreduce_c. Integer-valued floats make the sums exact.
 * Prints "N passed, N failed" (summed over ranks) on rank 0 and exits 1 on any failure.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const char* what, const float* got, const float* want, MPI_Count count) {
  for (MPI_Count i = 0; i < count; i++) {
    if (got[i] != want[i]) {
      printf("FAIL %s: element %lld is %g, expected %g\n", what, (long long)i, got[i], want[i]);
      return 0;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const MPI_Count count = ((MPI_Count)1 << 20) + 5;
  float* in = malloc(sizeof(float) * (size_t)count);
  float* out = malloc(sizeof(float) * (size_t)count);
  float* ref = malloc(sizeof(float) * (size_t)count);
  for (MPI_Count i = 0; i < count; i++) in[i] = (float)((rank + 1) * (int)(i % 113));
  PMPI_Allreduce_c(in, ref, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

  int passed = 0, failed = 0;
  memset(out, 0xA5, sizeof(float) * (size_t)count);
  MPI_Allreduce_c(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  check("MPI_Allreduce_c", out, ref, count) ? passed++ : failed++;

  memset(out, 0xA5, sizeof(float) * (size_t)count);
  MPI_Request request;
  MPI_Iallreduce_c(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  check("MPI_Iallreduce_c", out, ref, count) ? passed++ : failed++;

  memcpy(out, in, sizeof(float) * (size_t)count);
  MPI_Allreduce_c(MPI_IN_PLACE, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  check("MPI_Allreduce_c in place", out, ref, count) ? passed++ : failed++;

  int totals[2] = {passed, failed}, summed[2];
  PMPI_Reduce(totals, summed, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", summed[0], summed[1]);
  free(in);
  free(out);
  free(ref);
  MPI_Finalize();
  return failed ? 1 : 0;
}
