// The CUDA runtime calls of the NCCL plugin, emulated on the host (see emulated_gpu.h) over the
// fake CUDA driver: device memory is the fake driver's, contexts are its primary contexts, and
// each stream is a thread that runs its queued work in order.
//
// Only what the plugin calls exists; anything else fails to link, so a plugin change that needs
// more shows here first. What it does not model: kernels' concurrency within a stream, memory
// pools (cudaMallocAsync allocates at once, cudaFreeAsync frees in stream order), device limits,
// and errors other than a failed allocation, a bad pointer and a bad device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_gpu.h"

extern "C" {
// The fake driver's (tests/gpu_fake/fake_cuda_driver.c).
int cuInit(unsigned flags);
int cuDeviceGetCount(int* count);
int cuDevicePrimaryCtxRetain(void** context, int device);
int cuCtxSetCurrent(void* context);
int cuCtxGetCurrent(void** context);
int cuCtxGetDevice(int* device);
int cuMemAlloc_v2(unsigned long long* pointer, size_t bytes);
int cuMemFree_v2(unsigned long long pointer);
void* fakeCudaDeviceView(const void* pointer, size_t bytes);
unsigned long long fakeCudaDeferredMark(void);
void fakeCudaRunDeferredCopies(unsigned long long upTo);
}

namespace gfshim::emulated {
namespace {

thread_local cudaError_t tLastError = cudaSuccess;
thread_local int tDevice = 0;  // the runtime's current device of a thread without a context

cudaError_t fail(cudaError_t error) {
  tLastError = error;
  return error;
}

class Stream {
 public:
  explicit Stream(bool blocking) : blocking_(blocking), worker_([this] { run(); }) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();  // runs what was queued first, as a destroyed stream's work still completes
  }

  bool blocking() const { return blocking_; }
  uint64_t push(std::function<int()> work) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    changed_.notify_all();
    return ++enqueued_;
  }
  uint64_t enqueued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  // Until the first `seq` works have run.
  void waitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= seq; });
  }
  cudaError_t synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == enqueued_; });
    return error_;
  }
  cudaError_t query() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ < enqueued_ ? cudaErrorNotReady : error_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything ran
      std::function<int()> work = std::move(queue_.front());
      queue_.pop_front();
      const bool skip = error_ != cudaSuccess;  // a sticky error: later work does not run
      lock.unlock();
      const int result = skip ? 0 : work();
      lock.lock();
      if (result != 0 && error_ == cudaSuccess) error_ = static_cast<cudaError_t>(result);
      ++done_;
      changed_.notify_all();
    }
  }

  const bool blocking_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<int()>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t done_ = 0;
  cudaError_t error_ = cudaSuccess;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the members above exist
};

// Streams by handle. Never destroyed: worker threads may outlive static destructors at exit.
struct Registry {
  std::mutex mutex;
  std::map<const void*, std::shared_ptr<Stream>> streams;
};
Registry& registry() {
  static Registry* made = new Registry;
  return *made;
}

std::shared_ptr<Stream> streamOf(const void* handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.streams.find(handle);
  return found != r.streams.end() ? found->second : nullptr;
}

bool isLegacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

// What an event recorded at this point waits for: the work queued so far on each stream named.
using Marks = std::vector<std::pair<std::weak_ptr<Stream>, uint64_t>>;

Marks blockingStreamMarks() {
  Marks marks;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [handle, stream] : r.streams) {
    if (stream->blocking()) marks.emplace_back(stream, stream->enqueued());
  }
  return marks;
}

void waitForMarks(const Marks& marks) {
  for (const auto& [weak, seq] : marks) {
    if (std::shared_ptr<Stream> stream = weak.lock()) stream->waitFor(seq);
  }
}

// Legacy default stream semantics on the host: the blocking streams' work so far, and the fake
// driver's deferred copies (the application's), complete first.
void drainForLegacyStream() {
  waitForMarks(blockingStreamMarks());
  fakeCudaRunDeferredCopies(fakeCudaDeferredMark());
}

void synchronizeAll() {
  std::vector<std::shared_ptr<Stream>> all;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& [handle, stream] : r.streams) all.push_back(stream);
  }
  for (auto& stream : all) (void)stream->synchronize();
}

// The runtime makes the current device's primary context current when a thread has none.
cudaError_t ensureContext() {
  void* context = nullptr;
  if (cuCtxGetCurrent(&context) == 0 && context != nullptr) return cudaSuccess;
  (void)cuInit(0);
  if (cuDevicePrimaryCtxRetain(&context, tDevice) != 0) return fail(cudaErrorInvalidDevice);
  return cuCtxSetCurrent(context) == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

// FAKE_CUDA_RUNTIME_MEMORY_BYTES=N with FAKE_CUDA_RUNTIME_MEMORY_RANK=r: on the process of MPI
// rank r (OMPI_COMM_WORLD_RANK or PMI_RANK), the runtime's device allocations may hold at most
// N bytes at once, as on a nearly full GPU; the application's own (through the driver) do not
// count. Unlimited elsewhere.
class MemoryBudget {
 public:
  MemoryBudget() {
    const char* bytes = std::getenv("FAKE_CUDA_RUNTIME_MEMORY_BYTES");
    const char* rank = std::getenv("FAKE_CUDA_RUNTIME_MEMORY_RANK");
    const char* mine = std::getenv("OMPI_COMM_WORLD_RANK");
    if (mine == nullptr) mine = std::getenv("PMI_RANK");
    if (bytes != nullptr && rank != nullptr && mine != nullptr &&
        std::atoi(rank) == std::atoi(mine)) {
      limit_ = std::strtoull(bytes, nullptr, 10);
    }
  }
  // Checks and takes under one lock: two host threads (the blocking and the fused calls' groups)
  // allocate at the same time.
  bool reserve(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > limit_ - std::min(limit_, held_)) return false;
    held_ += bytes;
    return true;
  }
  void unreserve(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ -= bytes;
  }
  void taken(void* pointer, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[pointer] = bytes;
  }
  void given(void* pointer) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = sizes_.find(pointer);
    if (found == sizes_.end()) return;
    held_ -= found->second;
    sizes_.erase(found);
  }

 private:
  std::mutex mutex_;
  std::map<void*, size_t> sizes_;
  uint64_t held_ = 0;
  uint64_t limit_ = UINT64_MAX;
};
MemoryBudget& memoryBudget() {
  static MemoryBudget* made = new MemoryBudget;
  return *made;
}

// What a stream that waits for the event waits for; one recorded on the legacy default stream
// also waits for the application's copies queued on the fake driver before it was recorded
// (they run when the wait does, so a stream that does not wait, or waits for an event recorded
// before the copies were queued, reads stale inputs).
struct Event {
  Marks marks;
  bool legacy = false;
  unsigned long long copies = 0;  // legacy: the fake driver's copies queued before the record
};

}  // namespace

void* deviceView(const void* pointer, size_t bytes, const char* what) {
  void* view = fakeCudaDeviceView(pointer, bytes);
  if (view == nullptr) {
    std::fprintf(stderr,
                 "emulated GPU: %s was given %p (%zu bytes), which is not device memory: a GPU "
                 "would fault here\n",
                 what, pointer, bytes);
    std::abort();
  }
  return view;
}

void enqueue(void* stream, std::function<int()> work) {
  const auto handle = static_cast<cudaStream_t>(stream);
  if (isLegacy(handle)) {
    drainForLegacyStream();
    const int result = work();
    if (result != 0) tLastError = static_cast<cudaError_t>(result);
    return;
  }
  std::shared_ptr<Stream> found = streamOf(stream);
  if (found == nullptr) {
    std::fprintf(stderr, "emulated GPU: work queued on %p, which is not a stream\n", stream);
    std::abort();
  }
  found->push(std::move(work));
}

}  // namespace gfshim::emulated

namespace emulated = gfshim::emulated;

extern "C" {

cudaError_t cudaGetLastError(void) {
  const cudaError_t error = emulated::tLastError;
  emulated::tLastError = cudaSuccess;
  return error;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error (emulated)";
    case cudaErrorInvalidValue:
      return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation:
      return "out of memory (emulated)";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal (emulated)";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected (emulated)";
    case cudaErrorNotReady:
      return "device not ready (emulated)";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle (emulated)";
    default:
      return "unknown error (emulated)";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  (void)cuInit(0);
  if (cuDeviceGetCount(count) != 0 || *count == 0) {
    *count = 0;
    return emulated::fail(cudaErrorNoDevice);
  }
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  (void)cuInit(0);
  void* context = nullptr;
  if (cuDevicePrimaryCtxRetain(&context, device) != 0 || cuCtxSetCurrent(context) != 0) {
    return emulated::fail(cudaErrorInvalidDevice);
  }
  emulated::tDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  void* context = nullptr;
  if (cuCtxGetCurrent(&context) == 0 && context != nullptr && cuCtxGetDevice(device) == 0) {
    return cudaSuccess;
  }
  *device = emulated::tDevice;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || device < 0 || device >= devices) {
    return emulated::fail(cudaErrorInvalidDevice);
  }
  *value = 0;
  if (attribute == cudaDevAttrMemoryPoolsSupported) {
    const char* pools = std::getenv("FAKE_CUDA_MEMORY_POOLS");
    *value = pools == nullptr || pools[0] != '0' ? 1 : 0;
  }
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  const cudaError_t context = emulated::ensureContext();
  if (context != cudaSuccess) return context;
  unsigned long long made = 0;
  if (!emulated::memoryBudget().reserve(bytes)) return emulated::fail(cudaErrorMemoryAllocation);
  if (cuMemAlloc_v2(&made, bytes) != 0) {
    emulated::memoryBudget().unreserve(bytes);
    return emulated::fail(cudaErrorMemoryAllocation);
  }
  *pointer = reinterpret_cast<void*>(made);
  emulated::memoryBudget().taken(*pointer, bytes);
  return cudaSuccess;
}

// Allocated at once: a pool's memory is usable in stream order, and at once is in order.
cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream) {
  (void)stream;
  return cudaMalloc(pointer, bytes);
}

// As CUDA's: waits for all work on the device first.
cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  emulated::synchronizeAll();
  emulated::memoryBudget().given(pointer);
  return cuMemFree_v2(reinterpret_cast<unsigned long long>(pointer)) == 0
             ? cudaSuccess
             : emulated::fail(cudaErrorInvalidValue);
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  if (pointer == nullptr) return cudaSuccess;
  emulated::deviceView(pointer, 1, "cudaFreeAsync");
  emulated::enqueue(stream, [pointer] {
    emulated::memoryBudget().given(pointer);
    return cuMemFree_v2(reinterpret_cast<unsigned long long>(pointer)) == 0
               ? 0
               : static_cast<int>(cudaErrorInvalidValue);
  });
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  *pointer = std::malloc(bytes > 0 ? bytes : 1);
  return *pointer != nullptr ? cudaSuccess : emulated::fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const bool srcOnDevice = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dstOnDevice = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyHostToDevice &&
      kind != cudaMemcpyDeviceToDevice) {
    return emulated::fail(cudaErrorInvalidValue);  // the plugin names every direction
  }
  void* to = dstOnDevice ? emulated::deviceView(dst, bytes, "cudaMemcpyAsync (destination)") : dst;
  const void* from =
      srcOnDevice ? emulated::deviceView(src, bytes, "cudaMemcpyAsync (source)") : src;
  if (!dstOnDevice && fakeCudaDeviceView(dst, 1) != nullptr) {
    return emulated::fail(cudaErrorInvalidValue);  // a device destination named as host memory
  }
  if (!srcOnDevice && fakeCudaDeviceView(src, 1) != nullptr) {
    return emulated::fail(cudaErrorInvalidValue);
  }
  emulated::enqueue(stream, [to, from, bytes] {
    std::memmove(to, from, bytes);
    return 0;
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  void* view = emulated::deviceView(pointer, bytes, "cudaMemsetAsync");
  emulated::enqueue(stream, [view, value, bytes] {
    std::memset(view, value, bytes);
    return 0;
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  const cudaError_t context = emulated::ensureContext();
  if (context != cudaSuccess) return context;
  auto made = std::make_shared<emulated::Stream>((flags & cudaStreamNonBlocking) == 0);
  *stream = reinterpret_cast<cudaStream_t>(made.get());
  emulated::Registry& r = emulated::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.emplace(made.get(), std::move(made));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::shared_ptr<emulated::Stream> removed;
  {
    emulated::Registry& r = emulated::registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto found = r.streams.find(stream);
    if (found == r.streams.end()) return emulated::fail(cudaErrorInvalidResourceHandle);
    removed = std::move(found->second);
    r.streams.erase(found);
  }
  return cudaSuccess;  // its work completes when the last holder lets go (the worker joins)
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (emulated::isLegacy(stream)) return cudaSuccess;
  std::shared_ptr<emulated::Stream> found = emulated::streamOf(stream);
  return found != nullptr ? found->query() : emulated::fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (emulated::isLegacy(stream)) {
    emulated::drainForLegacyStream();
    return cudaSuccess;
  }
  std::shared_ptr<emulated::Stream> found = emulated::streamOf(stream);
  return found != nullptr ? found->synchronize() : emulated::fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  (void)flags;
  *event = reinterpret_cast<cudaEvent_t>(new emulated::Event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<emulated::Event*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto* recorded = reinterpret_cast<emulated::Event*>(event);
  if (emulated::isLegacy(stream)) {
    recorded->marks = emulated::blockingStreamMarks();
    recorded->legacy = true;
    recorded->copies = fakeCudaDeferredMark();
    return cudaSuccess;
  }
  std::shared_ptr<emulated::Stream> found = emulated::streamOf(stream);
  if (found == nullptr) return emulated::fail(cudaErrorInvalidResourceHandle);
  recorded->marks = {{found, found->enqueued()}};
  recorded->legacy = false;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  const emulated::Event& waited = *reinterpret_cast<emulated::Event*>(event);
  auto wait = [marks = waited.marks, legacy = waited.legacy, copies = waited.copies] {
    emulated::waitForMarks(marks);
    if (legacy) fakeCudaRunDeferredCopies(copies);
    return 0;
  };
  if (emulated::isLegacy(stream)) {
    wait();
    return cudaSuccess;
  }
  std::shared_ptr<emulated::Stream> found = emulated::streamOf(stream);
  if (found == nullptr) return emulated::fail(cudaErrorInvalidResourceHandle);
  found->push(std::move(wait));
  return cudaSuccess;
}

}  // extern "C"
