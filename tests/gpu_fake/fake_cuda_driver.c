/* A stand-in for the CUDA driver (libcuda.so.1) on machines without a GPU, for the tests of the
 * shim's GPU paths that need no GPU: memory-kind detection, the staging pipeline, the fused pack
 * and unpack, the pass-through staging and the route agreement.
 *
 * "Device memory" is real memory the host cannot touch: each allocation is a memfd mapped twice,
 * once PROT_NONE (the device pointer the program gets: any host access crashes, as it would on a
 * GPU without a CUDA-aware MPI) and once read-write (the fake's own view, used by the copies).
 * FAKE_CUDA_DEVICE_READABLE=1 maps the device view read-write instead, standing in for memory a
 * CUDA-aware MPI could read. FAKE_CUDA_NULL_CONTEXT=1 reports no context for device pointers, as
 * the real driver does for stream-ordered allocations (cudaMallocAsync pools). Like the real
 * driver, copies, streams and host registration need a current context.
 *
 * Asynchronous copies are deferred: they run only when their stream is synchronized, an event
 * recorded after them is waited for, or a synchronous copy runs (the legacy default stream
 * synchronizes with blocking streams). So a caller that reads a staging buffer before waiting, or
 * rewrites one before its copy ran, sees wrong data, as it could on a real GPU.
 *
 * Only the entry points the shim and its tests use exist; the CUDA runtime finds none of the
 * ones it needs (cuGetProcAddress), so a runtime loaded beside this fake reports no driver.
 * Functions that are not CUDA's serve the emulated GPU of tests/gpu_emul/ (which stands in for
 * the runtime there): fakeCudaDeviceView, fakeCudaDeferredMark and fakeCudaRunDeferredCopies.
 *
 * What it does not model, so what only a real GPU checks: stream flags and contexts (stream-0
 * work drains every stream of every context, non-blocking ones included, and a stream used under
 * another context works); GPU work of the application other than its copies; a synchronous
 * host-to-device copy returning before its DMA is done; stream and event destruction returning
 * before their work is done; cuMemHostRegister failures; memory kinds other than device and
 * unknown (pinned host, managed, VMM); and the cost of retaining a primary context. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kInvalidContext = 201,
  kInvalidHandle = 400,
};

#define MAX_ALLOCATIONS 4096
#define MAX_DEVICES 8

struct Allocation {
  char* device; /* the pointer the program holds */
  char* backing;
  size_t bytes;
  int ordinal;
};

struct Context {
  int ordinal;
};

enum OpKind { kCopyToHost, kCopyToDevice, kEventMark };
struct Op {
  enum OpKind kind;
  char* dst;
  const char* src;
  size_t bytes;
  struct Event* event;
  unsigned long long seq;
};

struct Stream {
  struct Op* ops;
  size_t count, capacity;
  struct Stream* next;
};

struct Event {
  struct Stream* stream; /* last recorded on, or NULL */
  unsigned long long seq;
  unsigned long long doneSeq;
};

static pthread_mutex_t gLock = PTHREAD_MUTEX_INITIALIZER;
/* Set once by cuInit, read without gLock by every call that needs an initialised driver: cuInit is
 * called again from any thread (the emulated runtime calls it on every cudaSetDevice), as the real
 * driver allows. */
static atomic_int gInitialized;
static pthread_once_t gInitOnce = PTHREAD_ONCE_INIT;
static struct Allocation gAllocations[MAX_ALLOCATIONS];
static struct Context gContexts[MAX_DEVICES];
static struct Stream* gStreams;
static unsigned long long gSeq;
static __thread struct Context* tContextStack[16];
static __thread int tContextDepth;

static int deviceCount(void) {
  const char* text = getenv("FAKE_CUDA_DEVICES");
  int n = text ? atoi(text) : 1;
  return n < 0 ? 0 : (n > MAX_DEVICES ? MAX_DEVICES : n);
}

/* The allocation holding [p, p+bytes) in the device view, or NULL. */
static struct Allocation* findAllocation(const void* p, size_t bytes) {
  const char* c = (const char*)p;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct Allocation* a = &gAllocations[i];
    if (a->device != NULL && c >= a->device && c + bytes <= a->device + a->bytes) return a;
  }
  return NULL;
}

static char* backingOf(const void* p, size_t bytes) {
  struct Allocation* a = findAllocation(p, bytes);
  return a ? a->backing + ((const char*)p - a->device) : NULL;
}

static void runOp(struct Op* op) {
  if (op->kind == kEventMark) {
    op->event->doneSeq = op->seq;
    return;
  }
  memcpy(op->dst, op->src, op->bytes);
}

/* Runs the stream's queued operations up to and including the one with sequence `upTo`. */
static void drain(struct Stream* s, unsigned long long upTo) {
  size_t done = 0;
  while (done < s->count && s->ops[done].seq <= upTo) runOp(&s->ops[done++]);
  memmove(s->ops, s->ops + done, (s->count - done) * sizeof(struct Op));
  s->count -= done;
}

static void drainAll(void) {
  for (struct Stream* s = gStreams; s != NULL; s = s->next) drain(s, ~0ULL);
}

static CUresult enqueue(struct Stream* s, struct Op op) {
  if (s == NULL) { /* stream 0: synchronous */
    drainAll();
    runOp(&op);
    return kSuccess;
  }
  if (s->count == s->capacity) {
    size_t capacity = s->capacity ? 2 * s->capacity : 16;
    struct Op* grown = realloc(s->ops, capacity * sizeof(struct Op));
    if (grown == NULL) return kOutOfMemory;
    s->ops = grown;
    s->capacity = capacity;
  }
  op.seq = ++gSeq;
  s->ops[s->count++] = op;
  return kSuccess;
}

static void initialiseOnce(void) {
  for (int i = 0; i < MAX_DEVICES; ++i) gContexts[i].ordinal = i;
  atomic_store_explicit(&gInitialized, 1, memory_order_release);
}

static int initialized(void) { return atomic_load_explicit(&gInitialized, memory_order_acquire); }

CUresult cuInit(unsigned flags) {
  (void)flags;
  pthread_once(&gInitOnce, initialiseOnce);
  return kSuccess;
}

CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

CUresult cuDeviceGetCount(int* count) {
  if (!initialized()) return kNotInitialized;
  *count = deviceCount();
  return kSuccess;
}

CUresult cuDeviceGet(int* device, int ordinal) {
  if (!initialized()) return kNotInitialized;
  if (ordinal < 0 || ordinal >= deviceCount()) return kInvalidValue;
  *device = ordinal;
  return kSuccess;
}

CUresult cuDeviceGetPCIBusId(char* text, int length, int device) {
  if (device < 0 || device >= deviceCount()) return kInvalidValue;
  snprintf(text, (size_t)length, "0000:%02X:00.0", 0x10 + device);
  return kSuccess;
}

static int gPrimaryRetained[MAX_DEVICES];

CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  if (!initialized()) return kNotInitialized;
  if (device < 0 || device >= deviceCount()) return kInvalidValue;
  *context = &gContexts[device];
  __atomic_store_n(&gPrimaryRetained[device], 1, __ATOMIC_RELEASE);
  return kSuccess;
}

/* Active once someone retained it, as the real driver's (which never releases here). */
CUresult cuDevicePrimaryCtxGetState(int device, unsigned* flags, int* active) {
  if (!initialized()) return kNotInitialized;
  if (device < 0 || device >= deviceCount()) return kInvalidValue;
  *flags = 0;
  *active = __atomic_load_n(&gPrimaryRetained[device], __ATOMIC_ACQUIRE);
  return kSuccess;
}

CUresult cuCtxSetCurrent(void* context) {
  if (tContextDepth == 0) tContextDepth = 1;
  tContextStack[tContextDepth - 1] = context;
  return kSuccess;
}

CUresult cuCtxGetCurrent(void** context) {
  *context = tContextDepth > 0 ? tContextStack[tContextDepth - 1] : NULL;
  return kSuccess;
}

CUresult cuCtxPushCurrent_v2(void* context) {
  if (context == NULL) return kInvalidContext;
  if (tContextDepth == 16) return kInvalidValue;
  tContextStack[tContextDepth++] = context;
  return kSuccess;
}

CUresult cuCtxPopCurrent_v2(void** context) {
  if (tContextDepth == 0) return kInvalidContext;
  struct Context* top = tContextStack[--tContextDepth];
  if (context != NULL) *context = top;
  return kSuccess;
}

static struct Context* currentContext(void) {
  return tContextDepth > 0 ? tContextStack[tContextDepth - 1] : NULL;
}

CUresult cuCtxGetDevice(int* device) {
  struct Context* context = currentContext();
  if (context == NULL) return kInvalidContext;
  *device = context->ordinal;
  return kSuccess;
}

/* Not a CUDA entry point: the fake's own read-write view of [pointer, pointer + bytes) of device
 * memory, or NULL when that range is not inside one device allocation. The emulated CUDA runtime,
 * kernels and NCCL of tests/gpu_emul/ reach device memory through it. */
void* fakeCudaDeviceView(const void* pointer, size_t bytes) {
  pthread_mutex_lock(&gLock);
  char* backing = backingOf(pointer, bytes);
  pthread_mutex_unlock(&gLock);
  return backing;
}

/* Not CUDA entry points, for the emulated runtime's streams that wait for an event on the
 * legacy default stream: the mark of the copies queued so far, and running every stream's
 * deferred copies up to a mark (those queued later stay deferred). */
unsigned long long fakeCudaDeferredMark(void) {
  pthread_mutex_lock(&gLock);
  unsigned long long mark = gSeq;
  pthread_mutex_unlock(&gLock);
  return mark;
}

void fakeCudaRunDeferredCopies(unsigned long long upTo) {
  pthread_mutex_lock(&gLock);
  for (struct Stream* s = gStreams; s != NULL; s = s->next) drain(s, upTo);
  pthread_mutex_unlock(&gLock);
}

CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  struct Context* context = currentContext();
  if (!initialized()) return kNotInitialized;
  if (context == NULL) return kInvalidContext;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t mapped = (bytes + page - 1) / page * page;
  if (mapped == 0) mapped = page;
  int fd = memfd_create("fake-cuda-device", 0);
  if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) return kOutOfMemory;
  const char* readable = getenv("FAKE_CUDA_DEVICE_READABLE");
  int protection = readable && readable[0] == '1' ? PROT_READ | PROT_WRITE : PROT_NONE;
  char* device = mmap(NULL, mapped, protection, MAP_SHARED, fd, 0);
  char* backing = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (device == MAP_FAILED || backing == MAP_FAILED) return kOutOfMemory;
  memset(backing, 0xA5, mapped); /* uninitialized device memory is garbage */
  pthread_mutex_lock(&gLock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (gAllocations[i].device == NULL) {
      gAllocations[i] = (struct Allocation){device, backing, mapped, context->ordinal};
      pthread_mutex_unlock(&gLock);
      *pointer = (CUdeviceptr)(uintptr_t)device;
      return kSuccess;
    }
  }
  pthread_mutex_unlock(&gLock);
  return kOutOfMemory;
}

CUresult cuMemFree_v2(CUdeviceptr pointer) {
  pthread_mutex_lock(&gLock);
  drainAll();
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct Allocation* a = &gAllocations[i];
    if (a->device == (char*)(uintptr_t)pointer) {
      munmap(a->device, a->bytes);
      munmap(a->backing, a->bytes);
      memset(a, 0, sizeof(*a));
      pthread_mutex_unlock(&gLock);
      return kSuccess;
    }
  }
  pthread_mutex_unlock(&gLock);
  return kInvalidValue;
}

/* Attributes: 1 context, 2 memory type, 8 is managed (bool), 9 device ordinal. Unknown pointers
 * get zeros and success, as the real cuPointerGetAttributes does. */
CUresult cuPointerGetAttributes(unsigned count, int* attributes, void** data, CUdeviceptr pointer) {
  if (!initialized()) return kNotInitialized;
  pthread_mutex_lock(&gLock);
  struct Allocation* a = findAllocation((const void*)(uintptr_t)pointer, 1);
  for (unsigned i = 0; i < count; ++i) {
    switch (attributes[i]) {
      case 1: {
        const char* nullContext = getenv("FAKE_CUDA_NULL_CONTEXT");
        int reportNone = nullContext && nullContext[0] == '1';
        *(void**)data[i] = a && !reportNone ? &gContexts[a->ordinal] : NULL;
        break;
      }
      case 2:
        *(unsigned*)data[i] = a ? 2u : 0u;
        break;
      case 8:
        *(unsigned char*)data[i] = 0;
        break;
      case 9:
        *(int*)data[i] = a ? a->ordinal : -2;
        break;
      default:
        pthread_mutex_unlock(&gLock);
        return kInvalidValue;
    }
  }
  pthread_mutex_unlock(&gLock);
  return kSuccess;
}

static CUresult copy(struct Stream* stream, void* dst, const void* src, size_t bytes, int toHost) {
  if (currentContext() == NULL) return kInvalidContext;
  pthread_mutex_lock(&gLock);
  char* backing = toHost ? backingOf(src, bytes) : backingOf(dst, bytes);
  CUresult result = kInvalidValue;
  if (backing != NULL) {
    struct Op op = {toHost ? kCopyToHost : kCopyToDevice,
                    toHost ? dst : backing,
                    toHost ? backing : src,
                    bytes,
                    NULL,
                    0};
    result = enqueue(stream, op);
  }
  pthread_mutex_unlock(&gLock);
  return result;
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(NULL, dst, (const void*)(uintptr_t)src, bytes, 1);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(NULL, (void*)(uintptr_t)dst, src, bytes, 0);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
  return copy(stream, dst, (const void*)(uintptr_t)src, bytes, 1);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
  return copy(stream, (void*)(uintptr_t)dst, src, bytes, 0);
}

CUresult cuStreamCreate(void** stream, unsigned flags) {
  (void)flags;
  if (currentContext() == NULL) return kInvalidContext;
  struct Stream* s = calloc(1, sizeof(struct Stream));
  if (s == NULL) return kOutOfMemory;
  pthread_mutex_lock(&gLock);
  s->next = gStreams;
  gStreams = s;
  pthread_mutex_unlock(&gLock);
  *stream = s;
  return kSuccess;
}

CUresult cuStreamSynchronize(void* stream) {
  pthread_mutex_lock(&gLock);
  if (stream == NULL) {
    drainAll();
  } else {
    drain(stream, ~0ULL);
  }
  pthread_mutex_unlock(&gLock);
  return kSuccess;
}

CUresult cuStreamDestroy_v2(void* stream) {
  pthread_mutex_lock(&gLock);
  struct Stream** link = &gStreams;
  while (*link != NULL && *link != stream) link = &(*link)->next;
  if (*link == NULL) {
    pthread_mutex_unlock(&gLock);
    return kInvalidHandle;
  }
  struct Stream* s = *link;
  drain(s, ~0ULL); /* destroying a stream lets its work finish */
  *link = s->next;
  free(s->ops);
  free(s);
  pthread_mutex_unlock(&gLock);
  return kSuccess;
}

CUresult cuEventCreate(void** event, unsigned flags) {
  (void)flags;
  if (currentContext() == NULL) return kInvalidContext;
  struct Event* e = calloc(1, sizeof(struct Event));
  if (e == NULL) return kOutOfMemory;
  *event = e;
  return kSuccess;
}

CUresult cuEventRecord(void* event, void* stream) {
  struct Event* e = event;
  pthread_mutex_lock(&gLock);
  struct Op op = {kEventMark, NULL, NULL, 0, e, 0};
  CUresult result = enqueue(stream, op);
  if (stream != NULL) {
    e->stream = stream;
    e->seq = gSeq;
  }
  pthread_mutex_unlock(&gLock);
  return result;
}

CUresult cuEventSynchronize(void* event) {
  struct Event* e = event;
  pthread_mutex_lock(&gLock);
  if (e->stream != NULL && e->doneSeq < e->seq) drain(e->stream, e->seq);
  pthread_mutex_unlock(&gLock);
  return kSuccess;
}

/* Work queued on `stream` from now on waits for the event: here the event's own queued work runs
 * now (deferred copies run only when something waits for them). */
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned flags) {
  (void)stream;
  (void)flags;
  struct Event* e = event;
  pthread_mutex_lock(&gLock);
  if (e->stream != NULL && e->doneSeq < e->seq) drain(e->stream, e->seq);
  pthread_mutex_unlock(&gLock);
  return kSuccess;
}

CUresult cuEventDestroy_v2(void* event) {
  pthread_mutex_lock(&gLock);
  drainAll(); /* a queued marker may still point at it */
  pthread_mutex_unlock(&gLock);
  free(event);
  return kSuccess;
}

CUresult cuMemHostRegister_v2(void* pointer, size_t bytes, unsigned flags) {
  (void)pointer;
  (void)bytes;
  (void)flags;
  return currentContext() != NULL ? kSuccess : kInvalidContext;
}

CUresult cuMemHostUnregister(void* pointer) {
  (void)pointer;
  return currentContext() != NULL ? kSuccess : kInvalidContext;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  switch (error) {
    case kSuccess:
      *text = "no error";
      break;
    case kInvalidValue:
      *text = "invalid argument";
      break;
    case kOutOfMemory:
      *text = "out of memory";
      break;
    case kNotInitialized:
      *text = "initialization error";
      break;
    case kInvalidContext:
      *text = "invalid device context";
      break;
    default:
      *text = "unknown error";
      break;
  }
  return kSuccess;
}
