/* Bitwise reproducibility (GFSHIM_REPRODUCIBLE=1), run under the shim.
 *
 * Every rank draws order-sensitive values (random floats and doubles of mixed magnitudes, seeded
 * by rank) and reduces them with blocking MPI_Allreduce calls of several sizes (tiny to a few MB,
 * in place or not) and with a burst of MPI_Iallreduce calls (fused by the shim). The reference is
 * computed without any allreduce: the inputs of every rank are gathered (MPI_Allgather) and summed
 * left to right in rank order, ((x0 + x1) + x2) ... . Every result must equal that reference bit
 * for bit on every rank. Since every run compares against the same rank-ordered sum, runs with
 * different algorithms, segment sizes and fusion settings give identical bits; the program also
 * prints a hash of all results so runs can be compared directly.
 *
 * usage: reproducible
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t valueState;     /* per rank: the values */
static uint64_t layoutState = 7; /* the same on every rank: the calls' counts */
static uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t next64(void) { return splitmix64(&valueState); }
/* A value in [-1, 1) times 2^e, e in [-20, 20]: sums of these depend on their order. */
static double orderSensitive(void) {
  const double unit = (double)(next64() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
  const int e = (int)(next64() % 41) - 20;
  double x = unit;
  for (int i = 0; i < (e < 0 ? -e : e); ++i) x = e < 0 ? x / 2 : x * 2;
  return x;
}

static int rank, size;
static uint64_t resultHash = 1469598103934665603ull;
static long mismatches, checked;

static void hashBytes(const void* data, size_t bytes) {
  const unsigned char* p = data;
  for (size_t i = 0; i < bytes; ++i) resultHash = (resultHash ^ p[i]) * 1099511628211ull;
}

/* The rank-ordered sum of every rank's `mine`, from the gathered inputs. */
static void referenceSum(const void* mine, void* expect, int count, int isDouble) {
  const size_t elem = isDouble ? sizeof(double) : sizeof(float);
  void* all = malloc((size_t)count * elem * (size_t)size);
  MPI_Allgather(mine, count, isDouble ? MPI_DOUBLE : MPI_FLOAT, all, count,
                isDouble ? MPI_DOUBLE : MPI_FLOAT, MPI_COMM_WORLD);
  for (int i = 0; i < count; ++i) {
    if (isDouble) {
      double s = ((double*)all)[i];
      for (int r = 1; r < size; ++r) s = s + ((double*)all)[(size_t)r * count + i];
      ((double*)expect)[i] = s;
    } else {
      float s = ((float*)all)[i];
      for (int r = 1; r < size; ++r) s = s + ((float*)all)[(size_t)r * count + i];
      ((float*)expect)[i] = s;
    }
  }
  free(all);
}

static void compare(const char* what, const void* got, const void* expect, int count,
                    int isDouble) {
  const size_t elem = isDouble ? sizeof(double) : sizeof(float);
  for (int i = 0; i < count; ++i) {
    ++checked;
    if (memcmp((const char*)got + (size_t)i * elem, (const char*)expect + (size_t)i * elem, elem)) {
      if (mismatches++ < 5) {
        fprintf(stderr, "reproducible: rank %d %s count %d element %d: %.17g, rank order gives %.17g\n",
                rank, what, count, i,
                isDouble ? ((const double*)got)[i] : ((const float*)got)[i],
                isDouble ? ((const double*)expect)[i] : ((const float*)expect)[i]);
      }
    }
  }
  hashBytes(got, (size_t)count * elem);
}

static void* draw(int count, int isDouble) {
  void* data = malloc((size_t)count * (isDouble ? sizeof(double) : sizeof(float)) + 1);
  for (int i = 0; i < count; ++i) {
    if (isDouble) ((double*)data)[i] = orderSensitive();
    else ((float*)data)[i] = (float)orderSensitive();
  }
  return data;
}

static void blockingCall(int count, int isDouble, int inPlace) {
  const size_t elem = isDouble ? sizeof(double) : sizeof(float);
  void* mine = draw(count, isDouble);
  void* expect = malloc((size_t)count * elem + 1);
  void* recv = malloc((size_t)count * elem + 1);
  referenceSum(mine, expect, count, isDouble);
  if (inPlace) memcpy(recv, mine, (size_t)count * elem);
  MPI_Allreduce(inPlace ? MPI_IN_PLACE : mine, recv, count, isDouble ? MPI_DOUBLE : MPI_FLOAT,
                MPI_SUM, MPI_COMM_WORLD);
  compare(inPlace ? "MPI_Allreduce in place" : "MPI_Allreduce", recv, expect, count, isDouble);
  free(mine);
  free(expect);
  free(recv);
}

enum { kBurst = 24 };

static void fusedBurst(void) {
  void* mine[kBurst];
  void* recv[kBurst];
  void* expect[kBurst];
  int counts[kBurst], doubles[kBurst];
  MPI_Request requests[kBurst];
  for (int i = 0; i < kBurst; ++i) {
    counts[i] = 1 + (int)(splitmix64(&layoutState) % 20000);
    doubles[i] = i % 3 == 0;
    mine[i] = draw(counts[i], doubles[i]);
    recv[i] = malloc((size_t)counts[i] * (doubles[i] ? sizeof(double) : sizeof(float)) + 1);
    expect[i] = malloc((size_t)counts[i] * (doubles[i] ? sizeof(double) : sizeof(float)) + 1);
    referenceSum(mine[i], expect[i], counts[i], doubles[i]);
  }
  for (int i = 0; i < kBurst; ++i) {
    MPI_Iallreduce(mine[i], recv[i], counts[i], doubles[i] ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD, &requests[i]);
  }
  MPI_Waitall(kBurst, requests, MPI_STATUSES_IGNORE);
  for (int i = 0; i < kBurst; ++i) {
    compare("MPI_Iallreduce", recv[i], expect[i], counts[i], doubles[i]);
    free(mine[i]);
    free(recv[i]);
    free(expect[i]);
  }
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  valueState = 0x5eed0000u + (uint64_t)rank;
  const int counts[] = {1, 7, 1000, 65536, 1000003};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
    for (int isDouble = 0; isDouble <= 1; ++isDouble) {
      blockingCall(counts[c], isDouble, 0);
      blockingCall(counts[c], isDouble, 1);
    }
  }
  fusedBurst();
  fusedBurst();
  long totals[2] = {mismatches, checked};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("reproducible: %ld of %ld elements differ from the rank-ordered sum; result hash "
           "%016llx: %s\n",
           totals[0], totals[1], (unsigned long long)resultHash, totals[0] ? "FAILED" : "passed");
  }
  MPI_Finalize();
  return totals[0] ? 1 : 0;
}
