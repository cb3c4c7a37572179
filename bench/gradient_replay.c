/* Gradient replay: the per-tensor MPI_Iallreduce traffic of one training step, as a framework
 * posts it during the backward pass, timed native against the shim in the same run.
 *
 * The tensors are the parameter tensors of ResNet-50 (161 tensors, 25.6 M parameters), AlexNet
 * (16 tensors, 61.1 M) and BERT-base (199 tensors, 109.5 M), built from their published layer
 * shapes, float32, posted in backward order (last layer first), then MPI_Waitall. "native" calls
 * PMPI_Iallreduce / PMPI_Waitall (which bypass a preloaded shim); "shim" calls MPI_Iallreduce /
 * MPI_Waitall, so without the shim preloaded both columns measure the MPI.
 *
 * Overlap (-o): the burst is posted, the rank computes (a floating-point loop, not a sleep) for
 * T = factor x the measured communication time, then waits; the fraction of communication
 * hidden is (t_comm + t_compute - t_total) / t_comm, clamped to [0, 1] (OSU-style).
 *
 * -m burst10x1K replays ten 1 KiB tensors instead, the latency-bound case fusion cannot help.
 * -t completes the burst by polling MPI_Testall (PMPI_Testall for native) instead of Waitall.
 * -p makes the native column per-tensor blocking: one PMPI_Allreduce per tensor in backward
 *    order, as a framework without fusion reduces its gradients (GradientFlow's baseline for
 *    lazy allreduce), where the MPI's MPI_Iallreduce cannot hold 161 calls in flight (SimGrid
 *    3.32's SMPI crashes). The shim column is unchanged.
 *
 * -c native|shim times that column alone (the other reads "-"): on simulated ranks the two
 *    columns can then run as two simulations side by side. With -c native the shim's correctness
 *    step is skipped too (and the check says so).
 *
 * -s (SimGrid SMPI builds only) allocates the gradients with SMPI_SHARED_MALLOC: one buffer
 *    shared by every simulated rank, so that hundreds of ranks fit in memory; the sums are then
 *    meaningless and the check is skipped (and says so).
 *
 * usage: gradient_replay [-m resnet50|alexnet|bert|burst10x1K|all] [-n iterations] [-w warmup]
 *                        [-o overlap factor, 0 = off] [-t] [-p] [-c native|shim] [-s]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kMaxTensors = 256 };

typedef struct {
  const char* name;
  int count;
  long long sizes[kMaxTensors]; /* forward order */
} Model;

static void add(Model* m, long long elements) { m->sizes[m->count++] = elements; }

static void conv(Model* m, long long in, long long out, long long k, int bias) {
  add(m, in * out * k * k);
  if (bias) add(m, out);
}

static void batchNorm(Model* m, long long channels) { add(m, channels); add(m, channels); }

static void resnet50(Model* m) {
  m->name = "resnet50";
  conv(m, 3, 64, 7, 0);
  batchNorm(m, 64);
  const int blocks[4] = {3, 4, 6, 3};
  long long in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const long long width = 64LL << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv(m, in, width, 1, 0);
      batchNorm(m, width);
      conv(m, width, width, 3, 0);
      batchNorm(m, width);
      conv(m, width, 4 * width, 1, 0);
      batchNorm(m, 4 * width);
      if (b == 0) {
        conv(m, in, 4 * width, 1, 0); /* downsample */
        batchNorm(m, 4 * width);
      }
      in = 4 * width;
    }
  }
  add(m, 2048LL * 1000);
  add(m, 1000);
}

static void alexnet(Model* m) {
  m->name = "alexnet";
  conv(m, 3, 64, 11, 1);
  conv(m, 64, 192, 5, 1);
  conv(m, 192, 384, 3, 1);
  conv(m, 384, 256, 3, 1);
  conv(m, 256, 256, 3, 1);
  add(m, 4096LL * 9216); add(m, 4096);
  add(m, 4096LL * 4096); add(m, 4096);
  add(m, 1000LL * 4096); add(m, 1000);
}

static void bert(Model* m) {
  const long long h = 768, ff = 3072;
  m->name = "bert-base";
  add(m, 30522 * h); add(m, 512 * h); add(m, 2 * h);
  add(m, h); add(m, h); /* embedding LayerNorm */
  for (int layer = 0; layer < 12; ++layer) {
    for (int proj = 0; proj < 4; ++proj) { add(m, h * h); add(m, h); } /* Q, K, V, output */
    add(m, h); add(m, h);                                               /* attention LayerNorm */
    add(m, h * ff); add(m, ff);
    add(m, ff * h); add(m, h);
    add(m, h); add(m, h); /* output LayerNorm */
  }
  add(m, h * h); add(m, h); /* pooler */
}

/* Not a model: ten 1 KiB tensors, the latency-bound case. */
static void smallBurst(Model* m) {
  m->name = "burst10x1K";
  for (int i = 0; i < 10; ++i) add(m, 256);
}

typedef int (*IallreduceFn)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request*);
typedef int (*WaitallFn)(int, MPI_Request*, MPI_Status*);

static volatile double sink;

static void* allocGradient(size_t bytes, int shared) {
#ifdef GFSHIM_SMPI
  if (shared) return SMPI_SHARED_MALLOC(bytes);
#endif
  (void)shared;
  return malloc(bytes);
}

/* Elements of tensor `i`'s slot in a shared arena: rounded up to 16 floats (64 bytes). */
static long long arenaSlot(const Model* m, int i) { return (m->sizes[i] + 15) / 16 * 16; }

static void freeGradient(void* p, int shared) {
#ifdef GFSHIM_SMPI
  if (shared) {
    SMPI_SHARED_FREE(p);
    return;
  }
#endif
  (void)shared;
  free(p);
}

static int blockingNative(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                          MPI_Comm comm, MPI_Request* request) {
  *request = MPI_REQUEST_NULL;
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}

static int pollShim(int count, MPI_Request* requests, MPI_Status* statuses) {
  int done = 0, rc = MPI_SUCCESS;
  while (!done && rc == MPI_SUCCESS) rc = MPI_Testall(count, requests, &done, statuses);
  return rc;
}

static int pollNative(int count, MPI_Request* requests, MPI_Status* statuses) {
  int done = 0, rc = MPI_SUCCESS;
  while (!done && rc == MPI_SUCCESS) rc = PMPI_Testall(count, requests, &done, statuses);
  return rc;
}

static void compute(double seconds) {
  const double end = MPI_Wtime() + seconds;
  double x = 1.0;
  while (MPI_Wtime() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  }
  sink = x;
}

/* One step: post every tensor in backward order, compute, wait. Returns the step time. */
static double step(const Model* m, float** grads, IallreduceFn iallreduce, WaitallFn waitall,
                   double computeSeconds) {
  MPI_Request requests[kMaxTensors];
  PMPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = m->count - 1, r = 0; i >= 0; --i, ++r) {
    iallreduce(MPI_IN_PLACE, grads[i], (int)m->sizes[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
               &requests[r]);
  }
  if (computeSeconds > 0) compute(computeSeconds);
  waitall(m->count, requests, MPI_STATUSES_IGNORE);
  return MPI_Wtime() - start;
}

static double median(double* v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j] < v[j - 1]; --j) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median over ranks' maxima of `iterations` steps. */
static double timeSteps(const Model* m, float** grads, IallreduceFn ia, WaitallFn wa,
                        double computeSeconds, int iterations) {
  double times[1000];
  for (int it = 0; it < iterations; ++it) {
    const double local = step(m, grads, ia, wa, computeSeconds);
    PMPI_Allreduce(&local, &times[it], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  return median(times, iterations);
}

static int checkSums(const Model* m, float** grads, int size, int steps) {
  /* every element started at 1 and was summed `steps` times over `size` ranks */
  float expect = 1.0f;
  for (int s = 0; s < steps; ++s) expect *= (float)size;
  for (int i = 0; i < m->count; ++i) {
    if (grads[i][0] != expect || grads[i][m->sizes[i] - 1] != expect) return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  const char* which = "all";
  int iterations = 10, warmup = 2;
  double overlap = 0;
  WaitallFn shimWait = MPI_Waitall, nativeWait = PMPI_Waitall;
  IallreduceFn nativeCall = PMPI_Iallreduce;
  int shared = 0, timeNative = 1, timeShim = 1;
  for (int opt; (opt = getopt(argc, argv, "m:n:w:o:tpc:s")) != -1;) {
    if (opt == 'm') which = optarg;
    else if (opt == 'n') iterations = atoi(optarg);
    else if (opt == 'w') warmup = atoi(optarg);
    else if (opt == 'o') overlap = atof(optarg);
    else if (opt == 't') { shimWait = pollShim; nativeWait = pollNative; }
    else if (opt == 'p') nativeCall = blockingNative;
    else if (opt == 'c' && strcmp(optarg, "native") == 0) timeShim = 0;
    else if (opt == 'c' && strcmp(optarg, "shim") == 0) timeNative = 0;
#ifdef GFSHIM_SMPI
    else if (opt == 's') shared = 1;
#endif
    else { fprintf(stderr, "usage: %s [-m model|all] [-n it] [-w warmup] [-o factor] [-t] [-p] [-c native|shim] [-s]\n", argv[0]); return 2; }
  }
  if (overlap > 0 && !(timeNative && timeShim)) {
    fprintf(stderr, "%s: -o compares both columns: not with -c\n", argv[0]);
    return 2;
  }
  if (iterations < 1 || iterations > 1000) iterations = 10;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  static Model models[4];
  resnet50(&models[0]);
  alexnet(&models[1]);
  bert(&models[2]);
  smallBurst(&models[3]);
  if (rank == 0) {
    printf("# gradient replay: %d ranks, median of %d steps after %d warm-up, float32 in place, %s%s\n",
           size, iterations, warmup, shimWait == MPI_Waitall ? "Waitall" : "polling Testall",
           nativeCall == blockingNative ? "; native: one blocking PMPI_Allreduce per tensor" : "");
    printf("# %-10s %8s %10s %12s %12s %10s\n", "model", "tensors", "MB", "native ms", "shim ms",
           "speedup");
  }
  int allOk = 1;
  for (int k = 0; k < 4; ++k) {
    const Model* m = &models[k];
    const int selected = strcmp(which, m->name) == 0 || (strcmp(which, "all") == 0 && k < 3) ||
                         (strcmp(which, "bert") == 0 && k == 2);
    if (!selected) continue;
    long long elements = 0;
    float* grads[kMaxTensors];
    /* Shared (-s): one allocation carved into the tensors, so that each simulated rank maps it
     * as a few blocks (SMPI maps every shared allocation per rank: 161 of them on 512 ranks
     * passed Linux's 65530 mappings a process). */
    float* arena = NULL;
    if (shared) {
      long long total = 0;
      for (int i = 0; i < m->count; ++i) total += arenaSlot(m, i);
      arena = allocGradient((size_t)total * sizeof(float), 1);
      if (!arena) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    }
    long long offset = 0;
    for (int i = 0; i < m->count; ++i) {
      elements += m->sizes[i];
      if (arena) {
        grads[i] = arena + offset;
        offset += arenaSlot(m, i);
        continue;
      }
      grads[i] = allocGradient((size_t)m->sizes[i] * sizeof(float), 0);
      if (!grads[i]) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    }
    /* correctness of one shim step */
    int ok = 1;
    if (timeShim) {
      for (int i = 0; i < m->count; ++i) for (long long e = 0; e < m->sizes[i]; ++e) grads[i][e] = 1.0f;
      step(m, grads, MPI_Iallreduce, shimWait, 0);
      ok = shared || checkSums(m, grads, size, 1);
    }
    allOk &= ok;
    for (int w = 0; w < warmup; ++w) {
      if (timeNative) step(m, grads, nativeCall, nativeWait, 0);
      if (timeShim) step(m, grads, MPI_Iallreduce, shimWait, 0);
    }
    const double native =
        timeNative ? timeSteps(m, grads, nativeCall, nativeWait, 0, iterations) : 0;
    const double shim = timeShim ? timeSteps(m, grads, MPI_Iallreduce, shimWait, 0, iterations) : 0;
    if (rank == 0 && timeNative && timeShim) {
      printf("  %-10s %8d %10.1f %12.2f %12.2f %9.2fx%s\n", m->name, m->count,
             elements * 4.0 / 1e6, native * 1e3, shim * 1e3, native / shim,
             ok ? "" : "  RESULT WRONG");
    } else if (rank == 0) {  /* one column (-c) */
      char nativeText[32] = "-", shimText[32] = "-";
      if (timeNative) snprintf(nativeText, sizeof(nativeText), "%.2f", native * 1e3);
      if (timeShim) snprintf(shimText, sizeof(shimText), "%.2f", shim * 1e3);
      printf("  %-10s %8d %10.1f %12s %12s %10s%s\n", m->name, m->count, elements * 4.0 / 1e6,
             nativeText, shimText, "-", ok ? "" : "  RESULT WRONG");
    }
    if (overlap > 0) {
      const double comm[2] = {native, shim};
      const char* label[2] = {"native", "shim"};
      for (int v = 0; v < 2; ++v) {
        const double t = overlap * comm[v];
        double computeAlone[64];
        for (int it = 0; it < 3; ++it) {
          const double start = MPI_Wtime();
          compute(t);
          computeAlone[it] = MPI_Wtime() - start;
        }
        const double tComp = median(computeAlone, 3);
        const double total = timeSteps(m, grads, v ? MPI_Iallreduce : nativeCall,
                                       v ? shimWait : nativeWait, t, iterations);
        double hidden = (comm[v] + tComp - total) / comm[v];
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        if (rank == 0) {
          printf("  %-10s overlap %-6s comm %8.2f ms, compute %8.2f ms, both %8.2f ms: %5.1f%% hidden\n",
                 m->name, label[v], comm[v] * 1e3, tComp * 1e3, total * 1e3, hidden * 100);
        }
      }
    }
    if (arena) {
      freeGradient(arena, 1);
    } else {
      for (int i = 0; i < m->count; ++i) freeGradient(grads[i], 0);
    }
  }
  if (rank == 0) {
    printf("# check: %s\n", !timeShim ? "skipped (-c native: no shim step)"
                             : shared  ? "skipped (-s: the gradients are shared by the simulated ranks)"
                             : allOk   ? "passed"
                                       : "FAILED");
  }
  MPI_Finalize();
  return allOk ? 0 : 1;
}
