/* small_calls: the hook's lane of small calls (hooks/allreduce_hook.cpp) answers from what it
 * remembers of the last datatype and op of each variant. This program alternates, on every
 * iteration, calls that the lane passes through (small blocking floats and ints, a small
 * MPI_Iallreduce) with calls it must leave to the policy (a large float the engine reduces, a
 * small call with a user-defined op), so that each remembered entry is replaced before its next
 * use. Every result is checked against the exact sum; the ctest checks the shim's statistics
 * count each kind of call exactly (ITERATIONS x ranks).
 *
 * usage: small_calls [ITERATIONS]   prints "small_calls: N iterations passed" on rank 0 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { kLarge = 1 << 16 };

static void userSum(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  for (int i = 0; i < *len; ++i) ((double*)inout)[i] += ((double*)in)[i];
}

static int wrong = 0;
static void expect(double got, double want, const char* what, int iteration) {
  if (got != want && wrong++ < 5) {
    fprintf(stderr, "small_calls: WRONG %s at iteration %d: %g, not %g\n", what, iteration, got,
            want);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int iterations = argc > 1 ? atoi(argv[1]) : 200;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const double rankSum = size * (size - 1) / 2.0; /* sum over ranks of the rank */
  MPI_Op user;
  MPI_Op_create(userSum, 1, &user);
  float* large = malloc(sizeof(float) * kLarge);
  float* largeOut = malloc(sizeof(float) * kLarge);
  for (int it = 0; it < iterations; ++it) {
    float f[2] = {(float)rank, (float)(it % 7)}, fOut[2];
    MPI_Allreduce(f, fOut, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    expect(fOut[0], rankSum, "small float", it);
    expect(fOut[1], (double)size * (it % 7), "small float", it);

    int n[3] = {rank, 1, it}, nOut[3];
    MPI_Allreduce(n, nOut, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    expect(nOut[0], rankSum, "small int", it);
    expect(nOut[1], size, "small int", it);
    expect(nOut[2], (double)size * it, "small int", it);

    for (int i = 0; i < kLarge; ++i) large[i] = (float)((rank + i + it) % 13);
    MPI_Allreduce(large, largeOut, kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < kLarge; i += 4099) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += (r + i + it) % 13;
      expect(largeOut[i], want, "large float", it);
    }

    double d = rank + 0.5, dOut = 0;
    MPI_Allreduce(&d, &dOut, 1, MPI_DOUBLE, user, MPI_COMM_WORLD);
    expect(dOut, rankSum + 0.5 * size, "user op", it);

    float g = (float)(rank * it), gOut = 0;
    MPI_Request request;
    MPI_Iallreduce(&g, &gOut, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    expect(gOut, rankSum * it, "small MPI_Iallreduce", it);
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (wrong == 0) printf("small_calls: %d iterations passed\n", iterations);
    else printf("small_calls: %d WRONG results\n", wrong);
  }
  free(large);
  free(largeOut);
  MPI_Op_free(&user);
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}
