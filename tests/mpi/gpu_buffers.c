/* Allreduces of GPU buffers through the shim, checked against PMPI_Allreduce on host copies.
 *
 *   gpu_buffers [mixed] [fused] [nohost] [pending] [errors] [beside] [comms] [kinds] [lossy] [time]
 * | csc (always) blocking MPI_Allreduce of device buffers: below GFSHIM_MIN_BYTES (staged around
 * the MPI call), above it (the engine: NCCL or the staging pipeline), int/float/double, SUM/MAX, in
 * place and not, counts that leave a short last block mixed    even ranks hold device buffers, odd
 * ranks host buffers (the route agreement; host ranks run the same pipeline blocks) fused    bursts
 * of MPI_Iallreduce on device (and host) buffers, in place and not, completed with MPI_Waitall
 *     nohost   the fused tensors all in device memory (otherwise every third one is in host
 *              memory), so whole buckets can go to NCCL
 *     pending  device inputs are written by an asynchronous copy on a stream of the program's own
 *              (a blocking stream, as a per-thread default stream is) that may still be pending
 *              when the allreduce is called: the shim must order its copies after it, as a
 *              synchronous copy on the legacy default stream would be
 *     errors   MPI_ERRORS_RETURN on MPI_COMM_WORLD: a blocking call that returns an error is
 *              reported ("returned an error: ...") and not compared, and the run goes on
 *     beside   also an MPI_Iallreduce still queued when a blocking call starts (prints how many
 *              were complete when the blocking call returned)
 *     comms    also on a duplicate of MPI_COMM_WORLD and on halves of it (split by rank parity),
 *              each freed after a blocking call and a fused burst
 *     kinds    also send and receive buffers of different kinds on one rank (host -> device,
 *              device -> host)
 *     lossy    also float SUMs the lossy modes take (values exact in fp16, so the check is exact)
 *     csc      instead of the checks above: the same float SUMs on host buffers and on device
 *              buffers, call after call, whose results must be identical (sparse and 16-bit
 *              modes are lossy, so the host engine's result is the reference; the residuals
 *              carry over, and the last call overflows fp16)
 *     time     afterwards, a table: MPI_Allreduce of device buffers (NCCL or staged) against host
 *              buffers of the same bytes, float SUM in place, median of 5 (bench/gpu_check.sh)
 *
 * Device memory comes from the CUDA driver API (tests/gpu_fake/cuda_test_api.h): the fake driver
 * on a machine without a GPU, where host access to it crashes, or the real one. Every result is
 * copied back and compared byte for byte; a mismatch aborts the job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_api.h"

static int gRank, gSize, gOnDevice, gFusedHostTensors = 1, gErrorsReturn;
static void* gAppStream; /* "pending": the program's own blocking stream */
static long gChecks, gErrors;
static MPI_Comm gComm; /* the blocking and fused cases' communicator: MPI_COMM_WORLD or, with
                          "comms", a duplicate or a split of it */

#define CHECK_CU(call)                                                         \
  do {                                                                         \
    int result_ = (call);                                                      \
    if (result_ != 0) {                                                        \
      fprintf(stderr, "[%d] %s failed: CUresult %d\n", gRank, #call, result_); \
      MPI_Abort(MPI_COMM_WORLD, 2);                                            \
    }                                                                          \
  } while (0)

/* A buffer of `bytes` in device memory (this rank's choice) or host memory. */
struct Buffer {
  void* pointer;
  int device;
  size_t bytes;
};

static struct Buffer bufferMake(size_t bytes, int onDevice) {
  struct Buffer b = {NULL, onDevice, bytes};
  if (onDevice) {
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAlloc_v2(&p, bytes ? bytes : 1));
    b.pointer = (void*)(uintptr_t)p;
  } else {
    b.pointer = malloc(bytes ? bytes : 1);
    memset(b.pointer, 0xA5, bytes);
  }
  return b;
}

static void bufferFree(struct Buffer* b) {
  if (b->device) {
    CHECK_CU(cuMemFree_v2((CUdeviceptr)(uintptr_t)b->pointer));
  } else {
    free(b->pointer);
  }
}

static void bufferWrite(struct Buffer* b, const void* host) {
  if (b->device && gAppStream != NULL) {
    CHECK_CU(cuMemcpyHtoDAsync_v2((CUdeviceptr)(uintptr_t)b->pointer, host, b->bytes, gAppStream));
  } else if (b->device) {
    CHECK_CU(cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)b->pointer, host, b->bytes));
  } else {
    memcpy(b->pointer, host, b->bytes);
  }
}

static void bufferRead(const struct Buffer* b, void* host) {
  if (b->device) {
    CHECK_CU(cuMemcpyDtoH_v2(host, (CUdeviceptr)(uintptr_t)b->pointer, b->bytes));
  } else {
    memcpy(host, b->pointer, b->bytes);
  }
}

/* Values whose sums over the ranks are exact in every type (and in fp16). */
static void fill(MPI_Datatype type, void* data, size_t count, int seed) {
  for (size_t i = 0; i < count; ++i) {
    int v = (int)((i * 7 + (size_t)seed * 13 + (size_t)gRank * 5) % 23) - 11;
    if (type == MPI_INT) ((int*)data)[i] = v;
    if (type == MPI_FLOAT) ((float*)data)[i] = (float)v;
    if (type == MPI_DOUBLE) ((double*)data)[i] = (double)v * 0.5;
  }
}

static size_t sizeOf(MPI_Datatype type) {
  int size = 0;
  MPI_Type_size(type, &size);
  return (size_t)size;
}

static void compare(const char* what, const void* got, const void* want, size_t bytes) {
  ++gChecks;
  if (memcmp(got, want, bytes) == 0) return;
  size_t at = 0;
  while (((const unsigned char*)got)[at] == ((const unsigned char*)want)[at]) ++at;
  fprintf(stderr, "[%d] WRONG %s: first difference at byte %zu of %zu\n", gRank, what, at, bytes);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* One blocking allreduce of `count` elements, device or host buffers per this rank's choice. */
static void blockingCaseOn(MPI_Datatype type, MPI_Op op, size_t count, int inPlace, int seed,
                           int sendOnDevice, int recvOnDevice) {
  const size_t bytes = count * sizeOf(type);
  void* input = malloc(bytes);
  void* want = malloc(bytes);
  void* got = malloc(bytes);
  fill(type, input, count, seed);
  PMPI_Allreduce(input, want, (int)count, type, op, gComm);
  struct Buffer send = bufferMake(bytes, sendOnDevice), recv = bufferMake(bytes, recvOnDevice);
  int rc;
  if (inPlace) {
    bufferWrite(&recv, input);
    rc = MPI_Allreduce(MPI_IN_PLACE, recv.pointer, (int)count, type, op, gComm);
  } else {
    bufferWrite(&send, input);
    rc = MPI_Allreduce(send.pointer, recv.pointer, (int)count, type, op, gComm);
  }
  char what[128];
  snprintf(what, sizeof(what), "blocking count %zu seed %d%s, send on %s, recv on %s", count, seed,
           inPlace ? " in place" : "", sendOnDevice ? "device" : "host",
           recvOnDevice ? "device" : "host");
  if (rc != MPI_SUCCESS) { /* only with MPI_ERRORS_RETURN */
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    fprintf(stderr, "[%d] MPI_Allreduce (%s) returned an error: %s\n", gRank, what, text);
    ++gErrors;
  } else {
    bufferRead(&recv, got);
    compare(what, got, want, bytes);
  }
  bufferFree(&send);
  bufferFree(&recv);
  free(input);
  free(want);
  free(got);
}

static void blockingCase(MPI_Datatype type, MPI_Op op, size_t count, int inPlace, int seed) {
  blockingCaseOn(type, op, count, inPlace, seed, gOnDevice, gOnDevice);
}

/* A burst of Iallreduces (every third one in host memory on every rank unless nohost, every other
 * one out of place), then MPI_Waitall. */
static void fusedCase(int tensors, int seed) {
  struct Buffer* buffers = calloc((size_t)tensors, sizeof(struct Buffer));
  struct Buffer* sources = calloc((size_t)tensors, sizeof(struct Buffer));
  float** wants = calloc((size_t)tensors, sizeof(float*));
  float** inputs = calloc((size_t)tensors, sizeof(float*)); /* kept: a copy may be pending */
  size_t* counts = calloc((size_t)tensors, sizeof(size_t));
  MPI_Request* requests = calloc((size_t)tensors, sizeof(MPI_Request));
  /* not MPI_STATUSES_IGNORE: MPICH's trips gcc's -Wstringop-overflow */
  MPI_Status* statuses = calloc((size_t)tensors, sizeof(MPI_Status));
  for (int t = 0; t < tensors; ++t) {
    counts[t] = (size_t)(1 + (t * 7919 + seed * 104729) % 70000);
    const size_t bytes = counts[t] * sizeof(float);
    float* input = inputs[t] = malloc(bytes);
    wants[t] = malloc(bytes);
    fill(MPI_FLOAT, input, counts[t], seed + t);
    PMPI_Allreduce(input, wants[t], (int)counts[t], MPI_FLOAT, MPI_SUM, gComm);
    buffers[t] = bufferMake(bytes, gOnDevice && (!gFusedHostTensors || t % 3 != 2));
    if (t % 2 == 1) {
      sources[t] = bufferMake(bytes, gOnDevice && (!gFusedHostTensors || t % 3 != 1));
      bufferWrite(&sources[t], input);
    } else {
      bufferWrite(&buffers[t], input);
    }
  }
  for (int t = 0; t < tensors; ++t) {
    MPI_Iallreduce(t % 2 == 1 ? sources[t].pointer : MPI_IN_PLACE, buffers[t].pointer,
                   (int)counts[t], MPI_FLOAT, MPI_SUM, gComm, &requests[t]);
  }
  MPI_Waitall(tensors, requests, statuses);
  for (int t = 0; t < tensors; ++t) {
    float* got = malloc(counts[t] * sizeof(float));
    bufferRead(&buffers[t], got);
    char what[96];
    snprintf(what, sizeof(what), "fused tensor %d of %d (count %zu)", t, tensors, counts[t]);
    compare(what, got, wants[t], counts[t] * sizeof(float));
    free(got);
    free(wants[t]);
    free(inputs[t]);
    bufferFree(&buffers[t]);
    if (t % 2 == 1) bufferFree(&sources[t]);
  }
  free(buffers);
  free(sources);
  free(wants);
  free(inputs);
  free(counts);
  free(requests);
  free(statuses);
}

/* "csc": one sequence of float SUMs, in place and not, on a pair of host buffers and on a pair of
 * device buffers (always the same addresses, so the residuals carry over from call to call). The
 * device results must be the host engine's bit for bit. The values are integers (with per-chunk
 * magnitudes that move from call to call, so the selection changes), which keeps every sum exact
 * in any order and in fp16, except in the last call, whose first 4096 sums overflow fp16 (the
 * redo makes them exact again). */
static void cscCase(void) {
  const size_t count = 100003;
  const size_t bytes = count * sizeof(float);
  const int calls = 6;
  float* input = malloc(bytes);
  float* fromHost = malloc(bytes);
  float* fromDevice = malloc(bytes);
  struct Buffer hostSend = bufferMake(bytes, 0), hostRecv = bufferMake(bytes, 0);
  struct Buffer deviceSend = bufferMake(bytes, 1), deviceRecv = bufferMake(bytes, 1);
  for (int call = 0; call < calls; ++call) {
    for (size_t i = 0; i < count; ++i) {
      const int magnitude = 1 + (int)((i / 4096 + (size_t)call * 3 + (size_t)gRank) % 5);
      input[i] =
          (float)((((int)((i * 7 + (size_t)call * 13 + (size_t)gRank * 5) % 23)) - 11) * magnitude);
      /* The last call's first chunk sums past fp16's range (in any order): an overflow redo */
      if (call == calls - 1 && i < 4096) input[i] = 40000.0f;
    }
    const int inPlace = call % 2;
    struct Buffer* sends[2] = {&hostSend, &deviceSend};
    struct Buffer* recvs[2] = {&hostRecv, &deviceRecv};
    for (int onDevice = 0; onDevice < 2; ++onDevice) {
      bufferWrite(inPlace ? recvs[onDevice] : sends[onDevice], input);
      MPI_Allreduce(inPlace ? MPI_IN_PLACE : sends[onDevice]->pointer, recvs[onDevice]->pointer,
                    (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    bufferRead(&hostRecv, fromHost);
    bufferRead(&deviceRecv, fromDevice);
    char what[64];
    snprintf(what, sizeof(what), "CSC call %d%s, device against host", call,
             inPlace ? " in place" : "");
    compare(what, fromDevice, fromHost, bytes);
  }
  if (gRank == 0) {
    printf(
        "gpu_buffers: CSC or 16 bits, %d calls of %zu floats, device results identical to host: "
        "%ld checks "
        "passed\n",
        calls, count, gChecks);
  }
  bufferFree(&hostSend);
  bufferFree(&hostRecv);
  bufferFree(&deviceSend);
  bufferFree(&deviceRecv);
  free(input);
  free(fromHost);
  free(fromDevice);
}

/* "beside": an MPI_Iallreduce still queued for the shim's fusion thread when a blocking
 * MPI_Allreduce of other device buffers starts. Prints how many of the fused operations were
 * complete when the blocking call returned (a blocking call through NCCL waits for them first). */
static void besideCase(void) {
  const size_t count = 300001;
  const size_t bytes = count * sizeof(float);
  const int rounds = 3;
  float* input = malloc(bytes);
  float* want = malloc(bytes);
  float* got = malloc(bytes);
  int completeFirst = 0;
  for (int round = 0; round < rounds; ++round) {
    fill(MPI_FLOAT, input, count, 70 + round);
    PMPI_Allreduce(input, want, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    struct Buffer fused = bufferMake(bytes, 1), blocking = bufferMake(bytes, 1);
    bufferWrite(&fused, input);
    bufferWrite(&blocking, input);
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, fused.pointer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   &request);
    MPI_Allreduce(MPI_IN_PLACE, blocking.pointer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    completeFirst += done;
    if (!done) MPI_Wait(&request, MPI_STATUS_IGNORE);
    bufferRead(&fused, got);
    compare("fused beside a blocking call", got, want, bytes);
    bufferRead(&blocking, got);
    compare("blocking beside a fused operation", got, want, bytes);
    bufferFree(&fused);
    bufferFree(&blocking);
  }
  if (gRank == 0) {
    printf(
        "gpu_buffers: beside: %d of %d fused operations complete when the blocking call "
        "returned\n",
        completeFirst, rounds);
  }
  free(input);
  free(want);
  free(got);
}

static int compareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Median seconds of 5 in-place float SUMs of `count` elements at `pointer` (after one warm-up). */
static double medianSeconds(void* pointer, size_t count) {
  double seconds[5];
  MPI_Allreduce(MPI_IN_PLACE, pointer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int r = 0; r < 5; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, pointer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    seconds[r] = elapsed;
  }
  qsort(seconds, 5, sizeof(double), compareDoubles);
  return seconds[2];
}

static void timeTable(void) {
  if (gRank == 0) {
    printf("gpu_buffers time: %d ranks, float SUM in place, median of 5\n", gSize);
    printf("%12s %12s %14s %8s\n", "bytes", "host(ms)", "device(ms)", "ratio");
  }
  for (size_t bytes = 1 << 20; bytes <= (size_t)256 << 20; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    struct Buffer host = bufferMake(bytes, 0), device = bufferMake(bytes, 1);
    float* values = malloc(bytes);
    fill(MPI_FLOAT, values, count, 1);
    bufferWrite(&host, values);
    bufferWrite(&device, values);
    const double hostSeconds = medianSeconds(host.pointer, count);
    const double deviceSeconds = medianSeconds(device.pointer, count);
    if (gRank == 0) {
      printf("%12zu %12.3f %14.3f %8.2f\n", bytes, hostSeconds * 1e3, deviceSeconds * 1e3,
             deviceSeconds / hostSeconds);
    }
    free(values);
    bufferFree(&host);
    bufferFree(&device);
  }
}

int main(int argc, char** argv) {
  int mixed = 0, fused = 0, lossy = 0, timed = 0, kinds = 0, pending = 0, csc = 0, comms = 0,
      beside = 0, provided = 0;
  for (int i = 1; i < argc; ++i) {
    mixed |= strcmp(argv[i], "mixed") == 0;
    fused |= strcmp(argv[i], "fused") == 0;
    lossy |= strcmp(argv[i], "lossy") == 0;
    timed |= strcmp(argv[i], "time") == 0;
    kinds |= strcmp(argv[i], "kinds") == 0;
    if (strcmp(argv[i], "nohost") == 0) gFusedHostTensors = 0;
    gErrorsReturn |= strcmp(argv[i], "errors") == 0;
    pending |= strcmp(argv[i], "pending") == 0;
    csc |= strcmp(argv[i], "csc") == 0;
    comms |= strcmp(argv[i], "comms") == 0;
    beside |= strcmp(argv[i], "beside") == 0;
  }
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  gComm = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  if (gErrorsReturn) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int devices = 0;
  void* context = NULL;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGetCount(&devices));
  int device = 0;
  CHECK_CU(cuDeviceGet(&device, devices > 0 ? gRank % devices : 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  gOnDevice = mixed ? gRank % 2 == 0 : 1;
  if (pending) CHECK_CU(cuStreamCreate(&gAppStream, 0));

  const size_t counts[] = {1000, 65536 + 3, 300001, 1048576 + 5};
  if (csc) {
    cscCase();
    MPI_Finalize();
    return 0;
  }
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      blockingCase(MPI_INT, MPI_SUM, counts[c], inPlace, (int)c);
      blockingCase(MPI_DOUBLE, MPI_MAX, counts[c], inPlace, (int)c + 10);
      if (lossy || c % 2 == 0) blockingCase(MPI_FLOAT, MPI_SUM, counts[c], inPlace, (int)c + 20);
    }
  }
  if (kinds) {
    for (size_t c = 1; c < sizeof(counts) / sizeof(counts[0]); ++c) {
      blockingCaseOn(MPI_INT, MPI_SUM, counts[c], 0, (int)c + 30, 0, 1);
      blockingCaseOn(MPI_INT, MPI_SUM, counts[c], 0, (int)c + 40, 1, 0);
    }
  }
  if (beside) besideCase();
  if (comms) {
    /* A duplicate of the world, then halves of it (ranks by parity), each freed after a blocking
     * call and a fused burst: the NCCL groups of every communicator are made and destroyed. */
    for (int which = 0; which < 2; ++which) {
      if (which == 0) {
        MPI_Comm_dup(MPI_COMM_WORLD, &gComm);
      } else {
        MPI_Comm_split(MPI_COMM_WORLD, gRank % 2, gRank, &gComm);
      }
      if (gErrorsReturn) MPI_Comm_set_errhandler(gComm, MPI_ERRORS_RETURN);
      blockingCase(MPI_FLOAT, MPI_SUM, counts[2], which, 50 + which);
      fusedCase(40, 60 + which);
      MPI_Comm_free(&gComm);
    }
    gComm = MPI_COMM_WORLD;
  }
  if (fused) {
    fusedCase(1, 1);
    fusedCase(40, 2);
    fusedCase(161, 3);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (timed) timeTable();
  if (gRank == 0) {
    printf(
        "gpu_buffers: %d ranks, %s buffers%s%s: %ld checks passed, %ld calls returned an error "
        "on rank 0\n",
        gSize, mixed ? "device (even ranks) and host (odd ranks)" : "device",
        fused ? ", fused" : "", lossy ? ", lossy" : "", gChecks, gErrors);
  }
  MPI_Finalize();
  return 0;
}
