/* Lossy modes under the shim (run with GFSHIM_COMPRESS / GFSHIM_CSC_DENSITY set by the test):
 *
 *  1. opt-in scope: double SUM, int SUM and float MAX of large buffers stay bit-identical to
 *     PMPI_Allreduce;
 *  2. float SUM, blocking and fused (a burst of MPI_Iallreduce): every rank holds identical bits,
 *     and without CSC the result is within the codec's error bound of the exact sum;
 *  3. overflow (fp16): contributions of 40000 sum past fp16's 65504; the shim must redo the call
 *     exactly, so the result is the exact integer sum, not Inf; with GFSHIM_PRESCALE=1 (third
 *     argument "prescale") the scaled partial sums stay in range: a finite, close result;
 *  4. CSC conservation: one call with data, then calls with zeros; the residuals drain, so the sum
 *     of everything delivered equals the exact sum of the data;
 *  5. CSC with buffers that differ between ranks (rank 0 alternates two buffers, so its residual
 *     entries are new while the others' are warm): the ranks agree dense/sparse and finish;
 *  6. momentum correction (third argument "momentum-update" or "momentum-gradient", with
 *     GFSHIM_CSC_MOMENTUM=0.5 and GFSHIM_CSC_MOMENTUM_OUTPUT as named): one call with data,
 *     then zeros. Each rank's velocity u = g, 0.5 g, 0.25 g ... accumulates until its chunk is
 *     sent, once, and then is cleared, so every element is delivered in exactly one call t, as
 *     sum over ranks of g (1 + 0.5 + ... + 0.5^(t - 2)), exactly (small integers times powers of
 *     two). With the gradient output the test recovers the update as the application's momentum
 *     optimizer would (U = 0.5 U + what came back), which must satisfy the same. With
 *     GFSHIM_CSC_MOMENTUM_DECAY=d (read from the environment; 0 when unset) the held accumulation
 *     is v = (1 - d) v + u, so with k = 1 - d call t delivers g (0.5^(t-2) + k 0.5^(t-3) + ... +
 *     k^(t-2)) instead: the ctest sets d = 0.5, which keeps every value exact.
 *
 *     Then a tensor far below every threshold (10 floats, blocking and MPI_Iallreduce + MPI_Wait):
 *     call c after one call with data must deliver the exact momentum update sum over ranks of
 *     g * 0.5^c. With the update output the shim must apply that momentum itself, dense (the MPI
 *     would return the plain sum once and then nothing); with the gradient output the call stays
 *     plain and the application's optimizer (U = 0.5 U + what came back) supplies it, so there the
 *     check is that the shim leaves the small call's result as the optimizer expects it.
 *
 *  7. local gradient clipping (third argument "clip", GFSHIM_CSC_CLIP=c, density 1): rank r sends
 *     r + 1 everywhere; the sum must be that of each rank's input scaled to an L2 norm of at most
 *     c / sqrt(ranks) (read from the environment, so the test follows the value set).
 *  8. fresh buffers (third argument "fresh"; only this part runs, so that the engines see only
 *     its operations): every step reduces two buffers allocated for it (all kept until the end,
 *     so no address repeats), as a framework that hands the MPI new gradient tensors every step,
 *     of kCount and kCount / 2 floats, blocking and fused. Three steps of zeros (with
 *     GFSHIM_CSC_KEY=position the shim learns the step meanwhile and runs them dense), one step
 *     with data, then zeros. With position keys the residuals follow the places, so the total
 *     delivered is the exact sum, as in 4; with address keys they stay with the data step's
 *     buffers, and the test checks that the total falls short (what position keys are for).
 *
 *  9. one buffer on two paths under momentum correction (third argument "two-paths"; only this
 *     part runs): kCount floats reduced three times with MPI_Allreduce, then three times with
 *     MPI_Iallreduce + MPI_Wait. Two velocities (the blocking engine's and the fusion queue's),
 *     or, with GFSHIM_FUSION=0, the MPI reducing the nonblocking calls, see parts of one
 *     gradient: the shim must warn (the ctests expect its words; the results must still be
 *     identical on every rank).
 *
 * usage: lossy_allreduce CODEC(none|fp16|bf16) DENSITY
 *                        [prescale|momentum-update|momentum-gradient|clip|fresh|two-paths]
 *                        (what the environment set)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;
static const char* codec;
static double density;
static int prescale;
static int momentum;          /* 6: momentum correction on */
static int momentumGradient;  /* 6: ... with the gradient output */
static int clip;              /* 7: local gradient clipping */

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      fprintf(stderr, "[%d] FAILED: ", rank);          \
      fprintf(stderr, __VA_ARGS__);                    \
      fprintf(stderr, "\n");                           \
      ++failures;                                      \
    }                                                  \
  } while (0)

enum { kCount = 1 << 19 }; /* 2 MB of floats: above GFSHIM_COMPRESS_MIN_BYTES=1M */

/* Every rank holds the same bits: compare with rank 0's by a bitwise checksum and a broadcast. */
static int identicalOnAllRanks(const float* values, int count) {
  unsigned long long hash = 1469598103934665603ull;
  const unsigned char* bytes = (const unsigned char*)values;
  for (size_t i = 0; i < (size_t)count * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  unsigned long long root = hash;
  PMPI_Bcast(&root, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  int same = root == hash, all = 0;
  PMPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

static float valueOf(int r, int i) { return (float)sin(0.001 * i + r) * (float)(1 + (i % 7)); }

static void optInScope(void) {
  double* d = malloc(kCount * sizeof(double));
  double* dRef = malloc(kCount * sizeof(double));
  int* n = malloc(kCount * sizeof(int));
  int* nRef = malloc(kCount * sizeof(int));
  float* f = malloc(kCount * sizeof(float));
  float* fRef = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) {
    d[i] = valueOf(rank, i) * 1.0000001;
    n[i] = i * (rank + 1);
    f[i] = valueOf(rank, i);
  }
  PMPI_Allreduce(d, dRef, kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(n, nRef, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(f, fRef, kCount, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, n, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, f, kCount, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(memcmp(n, nRef, kCount * sizeof(int)) == 0, "int SUM differs from PMPI under lossy settings");
  CHECK(memcmp(f, fRef, kCount * sizeof(float)) == 0, "float MAX differs from PMPI under lossy settings");
  /* double SUM: exact up to reassociation (the engine's ring orders the sum differently) */
  MPI_Allreduce(MPI_IN_PLACE, d, kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int close = 1;
  for (int i = 0; i < kCount; ++i) close &= fabs(d[i] - dRef[i]) <= 1e-12 * (fabs(dRef[i]) + size);
  CHECK(close, "double SUM is not exact under lossy settings");
  CHECK(identicalOnAllRanks((const float*)d, kCount * 2), "double SUM differs between ranks");
  free(d); free(dRef); free(n); free(nRef); free(f); free(fRef);
}

/* |got - exact| within the codec's bound (see src/algo/compressed_ring.h), loosely. */
static void checkDense(const float* got, int count, const char* what) {
  const double u = strcmp(codec, "fp16") == 0 ? 1.0 / 2048 : strcmp(codec, "bf16") == 0 ? 1.0 / 256 : 0;
  int bad = -1;
  for (int i = 0; i < count && bad < 0; ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < size; ++r) { exact += valueOf(r, i); magnitude += fabs(valueOf(r, i)); }
    const double bound = (size + 1) * (u + 2.0 / 16777216) * magnitude * 1.01 + size * 3e-8;
    if (fabs(got[i] - exact) > bound) bad = i;
  }
  CHECK(bad < 0, "%s: element %d outside the error bound", what, bad);
  CHECK(identicalOnAllRanks(got, count), "%s: ranks hold different bits", what);
}

static void floatSums(void) {
  float* x = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) x[i] = valueOf(rank, i);
  MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (density == 0) checkDense(x, kCount, "blocking float SUM");
  else CHECK(identicalOnAllRanks(x, kCount), "blocking CSC: ranks hold different bits");
  /* a fused burst: 8 tensors of 256K floats, posted then waited in a rank-dependent order */
  enum { kTensors = 8, kElems = 1 << 18 };
  float* t[kTensors];
  MPI_Request req[kTensors];
  for (int k = 0; k < kTensors; ++k) {
    t[k] = malloc(kElems * sizeof(float));
    for (int i = 0; i < kElems; ++i) t[k][i] = valueOf(rank, i);
    MPI_Iallreduce(MPI_IN_PLACE, t[k], kElems, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]);
  }
  for (int k = 0; k < kTensors; ++k) MPI_Wait(&req[(k + rank) % kTensors], MPI_STATUS_IGNORE);
  for (int k = 0; k < kTensors; ++k) {
    if (density == 0) checkDense(t[k], kElems, "fused float SUM");
    else CHECK(identicalOnAllRanks(t[k], kElems), "fused CSC: ranks hold different bits");
    free(t[k]);
  }
  free(x);
}

static void overflowRedo(void) {
  float* x = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) x[i] = i % 2 ? 40000.0f : 1.0f;
  MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int ok = 1;
  for (int i = 0; i < kCount; ++i) {
    const float expected = i % 2 ? 40000.0f * size : (float)size;
    ok &= prescale ? fabsf(x[i] - expected) <= 2e-3f * expected : x[i] == expected;
  }
  CHECK(ok, prescale ? "prescaled float SUM is not close to the exact sum (size %d)"
                     : "overflowing float SUM was not redone exactly (size %d)", size);
  free(x);
}

/* x (kCount floats) summed in place: one MPI_Allreduce, or (fused) four tensors of a quarter each
 * posted with MPI_Iallreduce and completed with MPI_Waitall: fused buckets carry each one's
 * residual. */
static void sumInPlace(float* x, int fused) {
  if (!fused) {
    MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return;
  }
  enum { kParts = 4 };
  const int part = kCount / kParts;
  MPI_Request req[kParts];
  for (int k = 0; k < kParts; ++k)
    MPI_Iallreduce(MPI_IN_PLACE, x + k * part, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]);
  MPI_Status statuses[kParts]; /* not MPI_STATUSES_IGNORE (gcc + MPICH warning) */
  MPI_Waitall(kParts, req, statuses);
}

/* The data of the conservation checks: rank r's element i, a small integer, so that every partial
 * sum is one too and every codec carries it exactly; and the exact sum of element i over ranks. */
static float smallInteger(int r, int i) { return (float)((i + r) % 5); }
static double smallIntegerSum(int i) {
  double exact = 0;
  for (int r = 0; r < size; ++r) exact += smallInteger(r, i);
  return exact;
}

/* Zeros, one call with data, then zeros until every chunk was selected once: the total delivered
 * is the exact sum. */
static void cscConservation(int fused) {
  float* x = malloc(kCount * sizeof(float));
  double* delivered = calloc(kCount, sizeof(double));
  /* the environment sets 2 warm-up calls: the data arrive once sparsity has started */
  const int calls = 3 + (int)ceil(1.0 / density) + 2;
  for (int c = 0; c < calls; ++c) {
    for (int i = 0; i < kCount; ++i) x[i] = c == 2 ? smallInteger(rank, i) : 0.0f;
    sumInPlace(x, fused);
    for (int i = 0; i < kCount; ++i) delivered[i] += x[i];
  }
  int bad = -1;
  for (int i = 0; i < kCount && bad < 0; ++i) {
    if (delivered[i] != smallIntegerSum(i)) bad = i;
  }
  CHECK(bad < 0, "CSC (%s) lost or invented gradient: element %d delivered %g",
        fused ? "fused" : "blocking", bad,
        bad < 0 ? 0.0 : delivered[bad]);
  free(x);
  free(delivered);
}

static void cscMomentumDelivery(int fused) {
  float* x = malloc(kCount * sizeof(float));
  float* update = calloc(kCount, sizeof(float));  /* the optimizer's velocity (gradient output) */
  int* deliveredAt = malloc(kCount * sizeof(int));
  for (int i = 0; i < kCount; ++i) deliveredAt[i] = -1;
  const int calls = 3 + (int)ceil(1.0 / density) + 2;
  const char* decayText = getenv("GFSHIM_CSC_MOMENTUM_DECAY");
  const float keep = 1.0f - (decayText ? (float)atof(decayText) : 0.0f);
  int bad = -1, twice = -1;
  for (int c = 0; c < calls; ++c) {
    for (int i = 0; i < kCount; ++i) x[i] = c == 2 ? smallInteger(rank, i) : 0.0f;
    sumInPlace(x, fused);
    CHECK(identicalOnAllRanks(x, kCount), "momentum (%s): ranks differ (call %d)",
          fused ? "fused" : "blocking", c);
    for (int i = 0; i < kCount; ++i) {
      const float d = momentumGradient ? (update[i] = 0.5f * update[i] + x[i]) : x[i];
      if (d == 0.0f) continue;
      if (deliveredAt[i] >= 0 && twice < 0) twice = i;
      deliveredAt[i] = c;
      float sum = 0, factor = 0, power = 1;
      for (int r = 0; r < size; ++r) sum += (float)((i + r) % 5);
      for (int t = 2; t <= c; ++t, power *= 0.5f) factor = keep * factor + power;
      if (d != sum * factor && bad < 0) bad = i;
    }
  }
  int lost = -1;
  for (int i = 0; i < kCount && lost < 0; ++i) {
    float sum = 0;
    for (int r = 0; r < size; ++r) sum += (float)((i + r) % 5);
    if (sum != 0 && deliveredAt[i] < 0) lost = i;
  }
  CHECK(bad < 0, "momentum (%s): element %d delivered a value other than the masked update",
        fused ? "fused" : "blocking", bad);
  CHECK(twice < 0, "momentum (%s): element %d delivered twice (its velocity was not cleared)",
        fused ? "fused" : "blocking", twice);
  CHECK(lost < 0, "momentum (%s): element %d never delivered", fused ? "fused" : "blocking", lost);
  free(x);
  free(update);
  free(deliveredAt);
}

static void momentumOfSmallTensors(int nonblocking) {
  enum { kSmall = 10, kCalls = 6 };
  static float buffers[2][kSmall]; /* one address each, used by nothing else */
  float* x = buffers[nonblocking];
  float update[kSmall] = {0};
  int bad = -1, badCall = -1;
  for (int c = 0; c < kCalls; ++c) {
    for (int i = 0; i < kSmall; ++i) x[i] = c == 0 ? smallInteger(rank, i) : 0.0f;
    if (nonblocking) {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, x, kSmall, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, x, kSmall, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    for (int i = 0; i < kSmall && bad < 0; ++i) {
      const float d = momentumGradient ? (update[i] = 0.5f * update[i] + x[i]) : x[i];
      if (d != (float)smallIntegerSum(i) * ldexpf(1.0f, -c)) {
        bad = i;
        badCall = c;
      }
    }
  }
  CHECK(bad < 0,
        "momentum of a small tensor (%s): element %d of call %d is not the momentum update",
        nonblocking ? "MPI_Iallreduce" : "MPI_Allreduce", bad, badCall);
}

static void momentumOnTwoPaths(void) {
  float* x = malloc(kCount * sizeof(float));
  for (int c = 0; c < 6; ++c) {
    for (int i = 0; i < kCount; ++i) x[i] = smallInteger(rank, i);
    if (c < 3) {
      MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    CHECK(identicalOnAllRanks(x, kCount), "one buffer on two paths: ranks differ (call %d)", c);
  }
  free(x);
}

static void cscClipping(void) {
  const char* setting = getenv("GFSHIM_CSC_CLIP");
  const double limit = (setting ? atof(setting) : 0) / sqrt((double)size);
  float* x = malloc(kCount * sizeof(float));
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < kCount; ++i) x[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double want = 0;
    for (int r = 0; r < size; ++r) {
      const double norm = (r + 1) * sqrt((double)kCount);
      want += (r + 1) * (norm > limit ? limit / norm : 1.0);
    }
    int bad = -1;
    for (int i = 0; i < kCount && bad < 0; ++i) bad = fabs(x[i] - want) <= 1e-5 * want ? -1 : i;
    CHECK(bad < 0, "clipping: element %d is %g, want %g (limit %g per rank)", bad,
          bad < 0 ? 0.0 : x[bad], want, limit);
  }
  free(x);
}

static void cscFreshBuffers(int fused) {
  const char* key = getenv("GFSHIM_CSC_KEY");
  const int byPosition = key != NULL && strcmp(key, "position") == 0;
  const int steps = 4 + (int)ceil(1.0 / density) + 2;
  const int counts[2] = {kCount, kCount / 2};
  float** buffers = calloc((size_t)steps * 2, sizeof(float*));
  double* delivered[2] = {calloc(kCount, sizeof(double)), calloc(kCount, sizeof(double))};
  for (int step = 0; step < steps; ++step) {
    MPI_Request req[2];
    for (int k = 0; k < 2; ++k) {
      float* x = buffers[2 * step + k] = malloc(counts[k] * sizeof(float));
      for (int i = 0; i < counts[k]; ++i) x[i] = step == 3 ? smallInteger(rank, i + k) : 0.0f;
      if (fused) {
        MPI_Iallreduce(MPI_IN_PLACE, x, counts[k], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]);
      } else {
        MPI_Allreduce(MPI_IN_PLACE, x, counts[k], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
    }
    if (fused) {
      MPI_Status statuses[2];
      MPI_Waitall(2, req, statuses);
    }
    for (int k = 0; k < 2; ++k) {
      for (int i = 0; i < counts[k]; ++i) delivered[k][i] += buffers[2 * step + k][i];
    }
  }
  long short_ = 0, wrong = 0;
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < counts[k]; ++i) {
      const double exact = smallIntegerSum(i + k);
      if (delivered[k][i] < exact) ++short_;
      if (delivered[k][i] > exact) ++wrong;
    }
  }
  CHECK(wrong == 0, "fresh buffers (%s): %ld elements delivered more than their sum",
        fused ? "fused" : "blocking", wrong);
  if (byPosition) {
    CHECK(short_ == 0, "fresh buffers (%s), position keys: %ld elements delivered less than their sum",
          fused ? "fused" : "blocking", short_);
  } else {
    CHECK(short_ > 0, "fresh buffers (%s), address keys: every element delivered, though each step's buffers are new",
          fused ? "fused" : "blocking");
  }
  if (rank == 0) {
    printf("lossy_allreduce: fresh buffers, %s keys, %s: %ld of %d elements short of their sum\n",
           byPosition ? "position" : "address", fused ? "fused" : "blocking", short_,
           counts[0] + counts[1]);
  }
  for (int b = 0; b < steps * 2; ++b) free(buffers[b]);
  free(buffers);
  free(delivered[0]);
  free(delivered[1]);
}

static void cscDifferentBuffers(void) {
  float* a = malloc(kCount * sizeof(float));
  float* b = malloc(kCount * sizeof(float));
  for (int c = 0; c < 6; ++c) {
    float* x = rank == 0 && c % 2 ? b : a;
    for (int i = 0; i < kCount; ++i) x[i] = valueOf(rank, i);
    MPI_Allreduce(MPI_IN_PLACE, x, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(identicalOnAllRanks(x, kCount), "CSC with different buffers: ranks differ (call %d)", c);
  }
  free(a);
  free(b);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s CODEC DENSITY\n", argv[0]);
    return 2;
  }
  codec = argv[1];
  density = atof(argv[2]);
  prescale = argc > 3 && strcmp(argv[3], "prescale") == 0;
  momentumGradient = argc > 3 && strcmp(argv[3], "momentum-gradient") == 0;
  momentum = momentumGradient || (argc > 3 && strcmp(argv[3], "momentum-update") == 0);
  clip = argc > 3 && strcmp(argv[3], "clip") == 0;
  const int fresh = argc > 3 && strcmp(argv[3], "fresh") == 0;
  const int twoPaths = argc > 3 && strcmp(argv[3], "two-paths") == 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (fresh || twoPaths) {
    if (fresh) {
      cscFreshBuffers(0);
      cscFreshBuffers(1);
    } else {
      momentumOnTwoPaths();
    }
    int total = 0;
    PMPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("lossy_allreduce: %s, density %g on %d ranks: %s\n", fresh ? "fresh buffers" : "two paths", density, size, total ? "FAILED" : "passed");
    MPI_Finalize();
    return total ? 1 : 0;
  }
  /* First, while every buffer's velocity is zero: the residual entries follow addresses, and a
   * buffer that floatSums frees leaves its velocity to the next one malloc places there. */
  if (density > 0 && momentum) {
    cscMomentumDelivery(0);
    cscMomentumDelivery(1);
    momentumOfSmallTensors(0);
    momentumOfSmallTensors(1);
  }
  optInScope();
  floatSums();
  if (strcmp(codec, "fp16") == 0 && density == 0) overflowRedo();
  if (clip) cscClipping();
  if (density > 0 && !momentum && !clip) {
    cscConservation(0);
    cscConservation(1);
  }
  if (density > 0) cscDifferentBuffers();
  int total = 0;
  PMPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("lossy_allreduce: codec %s density %g on %d ranks: %s\n", codec, density, size, total ? "FAILED" : "passed");
  MPI_Finalize();
  return total ? 1 : 0;
}
