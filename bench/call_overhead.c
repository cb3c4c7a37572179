/*
 * call_overhead: nanoseconds the shim adds to one tiny MPI_Allreduce that it passes through.
 * Times millions of 8-byte calls to MPI_Allreduce (through a preloaded shim) and to
 * PMPI_Allreduce (never through it) in the same process, alternating, and prints the best of
 * several repetitions of each. Run on one rank so no network or peer noise is in the number:
 *
 *   mpirun -np 1 -x LD_PRELOAD=$PWD/build/libgfshim.so build/bench/call_overhead
 */
#include <mpi.h>
#include <stdio.h>

enum { kCalls = 2000000, kRepetitions = 5 };

static double timeCalls(int throughShim) {
  float in[2] = {1, 2}, out[2];
  double start = MPI_Wtime();
  for (int i = 0; i < kCalls; i++) {
    if (throughShim) {
      MPI_Allreduce(in, out, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      PMPI_Allreduce(in, out, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - start) / kCalls * 1e9;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  double bestShim = 1e30, bestNative = 1e30;
  for (int r = 0; r < kRepetitions; r++) {
    double native = timeCalls(0), shim = timeCalls(1);
    if (native < bestNative) bestNative = native;
    if (shim < bestShim) bestShim = shim;
  }
  printf(
      "8-byte MPI_Allreduce on 1 rank: native %.1f ns, through MPI_Allreduce %.1f ns, added %.1f "
      "ns per call\n",
      bestNative, bestShim, bestShim - bestNative);
  MPI_Finalize();
  return 0;
}
