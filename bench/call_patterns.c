/* Never slower than native: the call patterns a preloaded shim meets, timed through the shim
 * (MPI_* calls, which a preloaded libgfshim.so intercepts) and natively (PMPI_* calls, which
 * bypass it) in the same processes, in alternating blocks, so both columns see the same machine
 * state. Without the shim preloaded both columns measure the MPI.
 *
 * Patterns (float SUM on MPI_COMM_WORLD unless said):
 *   iallreduce  one MPI_Iallreduce + MPI_Wait
 *   allreduce   one blocking MPI_Allreduce
 *   burst10     ten MPI_Iallreduce of the size, then MPI_Waitall
 *   resnet50    ResNet-50's 161 gradient tensors (25.6 M floats), posted in backward order, then
 *               MPI_Waitall (size column: total bytes)
 *   window20    20 nonblocking collectives in flight (Iallreduce, Ibcast, Ibarrier in turn),
 *               waited on one at a time in posting order
 *   overlap     MPI_Iallreduce, compute for as long as the native call takes, MPI_Wait (the
 *               post-compute-wait loop of the standard nonblocking benchmarks)
 *
 * Each cell runs `rounds` (default 64) alternating blocks of native and shim iterations, so that
 * both sides see the same machine state: this VM switches between a fast and a slow mode within
 * a run, and with 4 long blocks a cell's ratio moved by up to 10 % between runs, with 512 short
 * ones by 1-2 %. Rank 0 sizes the blocks to about `cell seconds` per side and tells the others.
 * Printed: median microseconds per iteration of each side and their ratio, one line per cell:
 *   pattern bytes native_us shim_us shim/native
 *
 * usage: call_patterns [-p pattern[,pattern...]] [-b min bytes] [-e max bytes] [-f factor]
 *                      [-t cell seconds] [-r rounds]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxSamples = 4096, kResnetTensors = 161, kWindow = 20 };

typedef struct {
  int shim; /* 1: MPI_* (through a preloaded shim), 0: PMPI_* */
} Side;

static int iallreduce(Side s, const void* a, void* b, int n, MPI_Request* r) {
  return s.shim ? MPI_Iallreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, r)
                : PMPI_Iallreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, r);
}
static int wait1(Side s, MPI_Request* r) {
  return s.shim ? MPI_Wait(r, MPI_STATUS_IGNORE) : PMPI_Wait(r, MPI_STATUS_IGNORE);
}
static MPI_Status statuses[kResnetTensors];
static int waitall(Side s, int n, MPI_Request* r) {
  return s.shim ? MPI_Waitall(n, r, statuses) : PMPI_Waitall(n, r, statuses);
}

static float* sendBuf;
static float* recvBuf;
static long long resnetSizes[kResnetTensors];
static double computeSeconds;
static volatile double sink;

static void compute(double seconds) {
  const double end = PMPI_Wtime() + seconds;
  double x = 1.0;
  while (PMPI_Wtime() < end) {
    for (int i = 0; i < 200; ++i) x = x * 1.0000001 + 1e-9;
  }
  sink = x;
}

static void buildResnet(void) {
  int n = 0;
#define ADD(v) (resnetSizes[n++] = (v))
  ADD(3LL * 64 * 49); ADD(64); ADD(64);
  const int blocks[4] = {3, 4, 6, 3};
  long long in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const long long w = 64LL << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      ADD(in * w); ADD(w); ADD(w);
      ADD(w * w * 9); ADD(w); ADD(w);
      ADD(w * 4 * w); ADD(4 * w); ADD(4 * w);
      if (b == 0) { ADD(in * 4 * w); ADD(4 * w); ADD(4 * w); }
      in = 4 * w;
    }
  }
  ADD(2048LL * 1000); ADD(1000);
#undef ADD
}

/* One iteration of `pattern` with `count` floats; returns seconds. */
static double once(const char* pattern, Side s, int count) {
  MPI_Request requests[kResnetTensors];
  const double start = PMPI_Wtime();
  if (strcmp(pattern, "iallreduce") == 0) {
    iallreduce(s, sendBuf, recvBuf, count, &requests[0]);
    wait1(s, &requests[0]);
  } else if (strcmp(pattern, "allreduce") == 0) {
    if (s.shim) MPI_Allreduce(sendBuf, recvBuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else PMPI_Allreduce(sendBuf, recvBuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (strcmp(pattern, "burst10") == 0) {
    for (int i = 0; i < 10; ++i) {
      iallreduce(s, sendBuf + (size_t)i * count, recvBuf + (size_t)i * count, count, &requests[i]);
    }
    waitall(s, 10, requests);
  } else if (strcmp(pattern, "resnet50") == 0) {
    size_t offset = 0;
    for (int t = kResnetTensors - 1; t >= 0; --t) { /* backward order */
      iallreduce(s, sendBuf + offset, recvBuf + offset, (int)resnetSizes[t], &requests[t]);
      offset += (size_t)resnetSizes[t];
    }
    waitall(s, kResnetTensors, requests);
  } else if (strcmp(pattern, "window20") == 0) {
    for (int i = 0; i < kWindow; ++i) {
      float* in = sendBuf + (size_t)i * count;
      float* out = recvBuf + (size_t)i * count;
      if (i % 3 == 0) {
        iallreduce(s, in, out, count, &requests[i]);
      } else if (i % 3 == 1) {
        if (s.shim) MPI_Ibcast(out, count, MPI_FLOAT, 0, MPI_COMM_WORLD, &requests[i]);
        else PMPI_Ibcast(out, count, MPI_FLOAT, 0, MPI_COMM_WORLD, &requests[i]);
      } else {
        if (s.shim) MPI_Ibarrier(MPI_COMM_WORLD, &requests[i]);
        else PMPI_Ibarrier(MPI_COMM_WORLD, &requests[i]);
      }
    }
    for (int i = 0; i < kWindow; ++i) wait1(s, &requests[i]);
  } else if (strcmp(pattern, "overlap") == 0) {
    iallreduce(s, sendBuf, recvBuf, count, &requests[0]);
    compute(computeSeconds);
    wait1(s, &requests[0]);
  }
  return PMPI_Wtime() - start;
}

/* "64M" -> 67108864: digits and an optional K, M or G (powers of 1024). */
static long long parseBytes(const char* text) {
  char* end = NULL;
  long long value = strtoll(text, &end, 10);
  switch (end != NULL ? *end : 0) {
    case 'K': case 'k': return value << 10;
    case 'M': case 'm': return value << 20;
    case 'G': case 'g': return value << 30;
    default: return value;
  }
}

static int compareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), compareDoubles);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Times one cell: a warm-up of each side, then `rounds` alternating blocks. The slowest rank's
 * time of each iteration counts (MAX over ranks). */
static void cell(const char* pattern, int count, double cellSeconds, int rounds, int rank) {
  static double native[kMaxSamples], shim[kMaxSamples];
  const Side nativeSide = {0}, shimSide = {1};
  if (strcmp(pattern, "overlap") == 0) {
    double samples[5];
    for (int i = 0; i < 5; ++i) samples[i] = once("iallreduce", nativeSide, count);
    computeSeconds = median(samples, 5);
    PMPI_Bcast(&computeSeconds, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  double probe = 0.5 * (once(pattern, nativeSide, count) + once(pattern, shimSide, count));
  PMPI_Allreduce(MPI_IN_PLACE, &probe, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int perBlock = (int)(cellSeconds / rounds / (probe > 1e-7 ? probe : 1e-7));
  if (perBlock < 1) perBlock = 1;
  if (perBlock * rounds > kMaxSamples) perBlock = kMaxSamples / rounds;
  int n = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < perBlock; ++i, ++n) {
      native[n] = once(pattern, nativeSide, count);
      PMPI_Barrier(MPI_COMM_WORLD);
    }
    n -= perBlock;
    for (int i = 0; i < perBlock; ++i, ++n) {
      shim[n] = once(pattern, shimSide, count);
      PMPI_Barrier(MPI_COMM_WORLD);
    }
  }
  PMPI_Allreduce(MPI_IN_PLACE, native, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  PMPI_Allreduce(MPI_IN_PLACE, shim, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    const double nativeUs = median(native, n) * 1e6, shimUs = median(shim, n) * 1e6;
    const long long bytes = strcmp(pattern, "resnet50") == 0 ? 0 : (long long)count * 4;
    long long total = bytes;
    if (strcmp(pattern, "resnet50") == 0) {
      for (int t = 0; t < kResnetTensors; ++t) total += resnetSizes[t] * 4;
    }
    printf("%-11s %12lld %12.1f %12.1f %8.2f\n", pattern, total, nativeUs, shimUs,
           shimUs / nativeUs);
    fflush(stdout);
  }
}

int main(int argc, char** argv) {
  const char* patterns = "iallreduce,allreduce,burst10,window20,overlap,resnet50";
  long long minBytes = 8, maxBytes = 64LL << 20;
  int factor = 8, rounds = 64;
  double cellSeconds = 0.4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-p") == 0) patterns = argv[i + 1];
    else if (strcmp(argv[i], "-b") == 0) minBytes = parseBytes(argv[i + 1]);
    else if (strcmp(argv[i], "-e") == 0) maxBytes = parseBytes(argv[i + 1]);
    else if (strcmp(argv[i], "-f") == 0) factor = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-t") == 0) cellSeconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "-r") == 0) rounds = atoi(argv[i + 1]);
  }
  if (factor < 2 || rounds < 1 || minBytes < 1 || maxBytes < minBytes) {
    fprintf(stderr, "call_patterns: -f needs an integer of at least 2, -r at least 1, and "
                    "1 <= -b <= -e\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  buildResnet();
  long long resnetFloats = 0;
  for (int t = 0; t < kResnetTensors; ++t) resnetFloats += resnetSizes[t];
  /* Room for 20 buffers of the largest size the many-buffer patterns use (<= 1/20 of max) */
  size_t floats = (size_t)(maxBytes / 4);
  if (floats < (size_t)resnetFloats) floats = (size_t)resnetFloats;
  sendBuf = malloc(floats * sizeof(float));
  recvBuf = malloc(floats * sizeof(float));
  for (size_t i = 0; i < floats; ++i) sendBuf[i] = (float)(i % 7);
  if (rank == 0) {
    printf("# call_patterns: %d ranks; median us per iteration, native (PMPI_*) vs shim (MPI_*)\n",
           size);
    printf("%-11s %12s %12s %12s %8s\n", "pattern", "bytes", "native_us", "shim_us", "ratio");
  }
  char list[256];
  snprintf(list, sizeof(list), "%s", patterns);
  /* strtok_r: a library the shim loads may call strtok meanwhile (seen with a progress thread) */
  char* rest = NULL;
  for (char* pattern = strtok_r(list, ",", &rest); pattern != NULL;
       pattern = strtok_r(NULL, ",", &rest)) {
    if (strcmp(pattern, "resnet50") == 0) {
      cell(pattern, 0, cellSeconds, rounds, rank);
      continue;
    }
    const int buffers = strcmp(pattern, "burst10") == 0 ? 10 : strcmp(pattern, "window20") == 0 ? 20 : 1;
    for (long long bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
      if ((size_t)(bytes / 4) * (size_t)buffers > floats) break;
      const int count = bytes / 4 > 0 ? (int)(bytes / 4) : 1;
      cell(pattern, count, cellSeconds, rounds, rank);
    }
  }
  free(sendBuf);
  free(recvBuf);
  MPI_Finalize();
  return 0;
}
