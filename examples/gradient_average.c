/*
 * gradient_average: a plain MPI program in the shape of data-parallel training. Every step, each
 * rank "computes" gradients for a set of layers and averages them across ranks with one blocking
 * MPI_Allreduce per layer, then checks the average. It knows nothing about libgfshim; preload the
 * shim to see it take the large layers:
 *
 *   mpirun -np 4 -x LD_PRELOAD=$PWD/build/libgfshim.so -x GFSHIM_STATS=1
 * build/examples/gradient_average
 *
 * Layer sizes follow a small CNN (a few large fully connected layers, many small ones), so some
 * calls cross GFSHIM_MIN_BYTES and some do not. Prints the communication time per step (the
 * allreduces only, slowest rank) and exits non-zero if an average is wrong.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static const int kLayerElements[] = {864,     32,  18432,   64,   73728,  128, 294912, 256,
                                     1179648, 512, 4194304, 1024, 524288, 512, 5120,   10};
enum { kLayers = sizeof(kLayerElements) / sizeof(kLayerElements[0]) };

/* Integer-valued "gradients": the sum over ranks is exact in float. */
static float gradient(int rank, int step, int layer, int i) {
  return (float)((rank + 1) * 3 + (i % 97) + layer + step % 5);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int steps = argc > 1 ? atoi(argv[1]) : 20;

  float* grads[kLayers];
  for (int l = 0; l < kLayers; l++) grads[l] = malloc(sizeof(float) * (size_t)kLayerElements[l]);

  long wrong = 0;
  double commSeconds = 0;
  for (int step = 0; step < steps; step++) {
    for (int l = 0; l < kLayers; l++) {
      for (int i = 0; i < kLayerElements[l]; i++) grads[l][i] = gradient(rank, step, l, i);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int l = kLayers - 1; l >= 0; l--) { /* backward order, as frameworks post them */
      MPI_Allreduce(MPI_IN_PLACE, grads[l], kLayerElements[l], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (step > 0) commSeconds += MPI_Wtime() - start; /* step 0 warms up */
    for (int l = 0; l < kLayers; l++) {
      for (int i = 0; i < kLayerElements[l]; i++) {
        float expected = 0;
        for (int r = 0; r < size; r++) expected += gradient(r, step, l, i);
        if (grads[l][i] != expected) wrong++;
      }
    }
  }
  double perStep = steps > 1 ? commSeconds / (steps - 1) : 0, slowest = 0;
  long wrongTotal = 0;
  MPI_Reduce(&wrong, &wrongTotal, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&perStep, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    long elements = 0;
    for (int l = 0; l < kLayers; l++) elements += kLayerElements[l];
    printf(
        "gradient_average: %d ranks, %d layers, %ld floats per step, allreduce time %.2f ms per "
        "step, %s\n",
        size, kLayers, elements, slowest * 1e3,
        wrongTotal ? "WRONG AVERAGES" : "all averages correct");
  }
  for (int l = 0; l < kLayers; l++) free(grads[l]);
  MPI_Finalize();
  return wrongTotal ? 1 : 0;
}
