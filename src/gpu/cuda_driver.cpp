#include "gpu/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cctype>
#include <ctime>
#include <mutex>

namespace gfshim {
namespace {

// The driver ABI (cuda.h), declared by hand so that every build can use it.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
constexpr CUresult kCudaSuccess = 0;
constexpr int kAttributeContext = 1;         // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kAttributeMemoryType = 2;      // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeIsManaged = 8;       // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr int kAttributeDeviceOrdinal = 9;   // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2;    // CU_MEMORYTYPE_DEVICE
constexpr unsigned kStreamDefault = 0;       // CU_STREAM_DEFAULT: synchronizes with stream 0
constexpr unsigned kEventDisableTiming = 2;  // CU_EVENT_DISABLE_TIMING
constexpr unsigned kHostRegisterPortable = 1;

CUdeviceptr devicePointer(const void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}

}  // namespace

struct CudaDriver::Api {
  CUresult (*pointerGetAttributes)(unsigned, int*, void**, CUdeviceptr);
  CUresult (*getErrorString)(CUresult, const char**);
  CUresult (*ctxPushCurrent)(CUcontext);
  CUresult (*ctxPopCurrent)(CUcontext*);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*deviceGetPciBusId)(char*, int, CUdevice);
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*memcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*streamCreate)(CUstream*, unsigned);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*eventCreate)(CUevent*, unsigned);
  CUresult (*eventDestroy)(CUevent);
  CUresult (*eventRecord)(CUevent, CUstream);
  CUresult (*eventSynchronize)(CUevent);
  CUresult (*memHostRegister)(void*, size_t, unsigned);
  CUresult (*memHostUnregister)(void*);
  CUresult (*devicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*devicePrimaryCtxGetState)(CUdevice, unsigned*, int*);
  CUresult (*streamWaitEvent)(CUstream, CUevent, unsigned);
};

namespace {

// Makes `context` current on this thread for the scope and restores the previous one.
class ContextScope {
 public:
  ContextScope(const CudaDriver::Api& api, void* context) : api_(api) {
    pushed_ = context != nullptr && api_.ctxPushCurrent(context) == kCudaSuccess;
  }
  ~ContextScope() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    api_.ctxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const CudaDriver::Api& api_;
  bool pushed_ = false;
};

template <typename Function>
bool bindSymbol(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  return *function != nullptr;
}

// Versioned names where the driver has them (cuda.h maps the plain names to these).
bool bindApi(void* library, CudaDriver::Api* api) {
  return bindSymbol(library, "cuPointerGetAttributes", &api->pointerGetAttributes) &&
         bindSymbol(library, "cuGetErrorString", &api->getErrorString) &&
         bindSymbol(library, "cuCtxPushCurrent_v2", &api->ctxPushCurrent) &&
         bindSymbol(library, "cuCtxPopCurrent_v2", &api->ctxPopCurrent) &&
         bindSymbol(library, "cuDeviceGet", &api->deviceGet) &&
         bindSymbol(library, "cuDeviceGetPCIBusId", &api->deviceGetPciBusId) &&
         bindSymbol(library, "cuMemcpyDtoH_v2", &api->memcpyDtoH) &&
         bindSymbol(library, "cuMemcpyHtoD_v2", &api->memcpyHtoD) &&
         bindSymbol(library, "cuMemcpyDtoHAsync_v2", &api->memcpyDtoHAsync) &&
         bindSymbol(library, "cuMemcpyHtoDAsync_v2", &api->memcpyHtoDAsync) &&
         bindSymbol(library, "cuStreamCreate", &api->streamCreate) &&
         bindSymbol(library, "cuStreamDestroy_v2", &api->streamDestroy) &&
         bindSymbol(library, "cuStreamSynchronize", &api->streamSynchronize) &&
         bindSymbol(library, "cuEventCreate", &api->eventCreate) &&
         bindSymbol(library, "cuEventDestroy_v2", &api->eventDestroy) &&
         bindSymbol(library, "cuEventRecord", &api->eventRecord) &&
         bindSymbol(library, "cuEventSynchronize", &api->eventSynchronize) &&
         bindSymbol(library, "cuMemHostRegister_v2", &api->memHostRegister) &&
         bindSymbol(library, "cuMemHostUnregister", &api->memHostUnregister) &&
         bindSymbol(library, "cuDevicePrimaryCtxRetain", &api->devicePrimaryCtxRetain) &&
         bindSymbol(library, "cuDevicePrimaryCtxGetState", &api->devicePrimaryCtxGetState) &&
         bindSymbol(library, "cuStreamWaitEvent", &api->streamWaitEvent);
}

}  // namespace

namespace {
std::atomic<const CudaDriver*> gFound{nullptr};
std::atomic<unsigned long long> gLoadsSeen{~0ULL};
std::atomic<long long> gTickSeen{-1};

// The dynamic loader's count of objects ever loaded: one dl_iterate_phdr step (~20 ns), against
// ~15 us for a dlopen(RTLD_NOLOAD) that does not find its library.
unsigned long long loaderAdds() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<unsigned long long*>(data) = info->dlpi_adds;
        return 1;  // the counter is global: the first object is enough
      },
      &adds);
  return adds;
}
}  // namespace

const CudaDriver* CudaDriver::inProcess() {
  if (const CudaDriver* driver = gFound.load(std::memory_order_acquire)) return driver;
  // Look again only once per tick of the coarse clock (a few ms; ~5 ns to read through the vDSO)
  // and then only when a library was loaded since the last look. Device memory cannot appear
  // within one tick of the driver's loading: cuInit alone takes far longer.
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const long long tick = static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
  if (tick == gTickSeen.load(std::memory_order_relaxed)) return nullptr;
  gTickSeen.store(tick, std::memory_order_relaxed);
  const unsigned long long adds = loaderAdds();
  if (adds == gLoadsSeen.load(std::memory_order_relaxed)) return nullptr;
  static std::mutex lookup;
  std::lock_guard<std::mutex> lock(lookup);
  if (const CudaDriver* driver = gFound.load(std::memory_order_relaxed)) return driver;
  gLoadsSeen.store(adds, std::memory_order_relaxed);
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  static Api api;
  if (!bindApi(library, &api)) return nullptr;  // too old a driver: no device memory handled
  static const CudaDriver driver(&api);
  gFound.store(&driver, std::memory_order_release);
  return &driver;  // the handle stays open for the life of the process
}

Status CudaDriver::check(int result, const char* what) const {
  if (result == kCudaSuccess) return Status::ok();
  const char* text = nullptr;
  if (api_->getErrorString(result, &text) != kCudaSuccess || text == nullptr) text = "unknown";
  return Status::error(
      StatusCode::kTransportError,
      std::string(what) + " failed: " + text + " (CUresult " + std::to_string(result) + ")");
}

BufferPlacement CudaDriver::placementOf(const void* pointer) const {
  int attributes[] = {kAttributeMemoryType, kAttributeDeviceOrdinal, kAttributeContext,
                      kAttributeIsManaged};
  unsigned memoryType = 0;
  int ordinal = -1;
  CUcontext context = nullptr;
  int managed = 0;  // a bool in the driver; read as the int it is padded into
  void* values[] = {&memoryType, &ordinal, &context, &managed};
  BufferPlacement placement;
  if (api_->pointerGetAttributes(4, attributes, values, devicePointer(pointer)) != kCudaSuccess) {
    return placement;  // e.g. CUDA_ERROR_NOT_INITIALIZED: no device memory exists yet
  }
  if (memoryType == kMemoryTypeDevice || (managed & 0xff) != 0) {
    placement.kind = MemKind::kDevice;
    placement.device = ordinal;
    // Memory of a context the application made itself says which; the primary context is
    // retained only when it is needed (no context given) or already exists, so a program that
    // never uses the primary context does not get a second one from the shim.
    void* primary = primaryContextOf(ordinal, /*evenIfInactive=*/context == nullptr);
    placement.context = context != nullptr ? context : primary;
    placement.primaryContext = placement.context != nullptr && placement.context == primary;
  }
  return placement;
}

BufferPlacements CudaDriver::placementsOf(const CudaDriver* driver, const void* send,
                                          const void* recv) {
  BufferPlacements at;
  if (driver == nullptr) return at;
  at.recv = driver->placementOf(recv);
  at.send = send == recv ? at.recv : driver->placementOf(send);
  return at;
}

// Retained once per device and never released: the process keeps its primary contexts anyway.
// Once retained, a call costs one atomic load (it runs for every device pointer of every call).
void* CudaDriver::primaryContextOf(int device, bool evenIfInactive) const {
  constexpr int kMaxDevices = 64;
  static std::atomic<void*> contexts[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (void* known = contexts[device].load(std::memory_order_acquire)) return known;
  CUdevice handle = 0;
  if (api_->deviceGet(&handle, device) != kCudaSuccess) return nullptr;
  unsigned flags = 0;
  int active = 0;
  if (!evenIfInactive &&
      (api_->devicePrimaryCtxGetState(handle, &flags, &active) != kCudaSuccess || active == 0)) {
    return nullptr;
  }
  CUcontext context = nullptr;
  if (api_->devicePrimaryCtxRetain(&context, handle) != kCudaSuccess) return nullptr;
  void* expected = nullptr;
  if (!contexts[device].compare_exchange_strong(expected, context)) return expected;
  return context;
}

Status CudaDriver::pciBusId(int device, std::string* busId) const {
  CUdevice handle = 0;
  GFSHIM_RETURN_IF_ERROR(check(api_->deviceGet(&handle, device), "cuDeviceGet"));
  char text[64] = {};
  GFSHIM_RETURN_IF_ERROR(
      check(api_->deviceGetPciBusId(text, sizeof(text), handle), "cuDeviceGetPCIBusId"));
  busId->assign(text);
  for (char& c : *busId) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return Status::ok();
}

Status CudaDriver::copyToHost(void* context, void* host, const void* device, size_t bytes) const {
  const ContextScope scope(*api_, context);
  return check(api_->memcpyDtoH(host, devicePointer(device), bytes), "cuMemcpyDtoH");
}

Status CudaDriver::copyToDevice(void* context, void* device, const void* host, size_t bytes) const {
  const ContextScope scope(*api_, context);
  GFSHIM_RETURN_IF_ERROR(
      check(api_->memcpyHtoD(devicePointer(device), host, bytes), "cuMemcpyHtoD"));
  return check(api_->streamSynchronize(nullptr), "cuStreamSynchronize");
}

Status CudaDriver::createStream(void* context, void** stream) const {
  const ContextScope scope(*api_, context);
  return check(api_->streamCreate(stream, kStreamDefault), "cuStreamCreate");
}

void CudaDriver::destroyStream(void* context, void* stream) const {
  const ContextScope scope(*api_, context);
  api_->streamDestroy(stream);
}

Status CudaDriver::createEvent(void* context, void** event) const {
  const ContextScope scope(*api_, context);
  return check(api_->eventCreate(event, kEventDisableTiming), "cuEventCreate");
}

void CudaDriver::destroyEvent(void* context, void* event) const {
  const ContextScope scope(*api_, context);
  api_->eventDestroy(event);
}

Status CudaDriver::copyToHostAsync(void* context, void* host, const void* device, size_t bytes,
                                   void* stream) const {
  const ContextScope scope(*api_, context);
  return check(api_->memcpyDtoHAsync(host, devicePointer(device), bytes, stream),
               "cuMemcpyDtoHAsync");
}

Status CudaDriver::copyToDeviceAsync(void* context, void* device, const void* host, size_t bytes,
                                     void* stream) const {
  const ContextScope scope(*api_, context);
  return check(api_->memcpyHtoDAsync(devicePointer(device), host, bytes, stream),
               "cuMemcpyHtoDAsync");
}

Status CudaDriver::recordEvent(void* context, void* event, void* stream) const {
  const ContextScope scope(*api_, context);
  return check(api_->eventRecord(event, stream), "cuEventRecord");
}

Status CudaDriver::orderAfterLegacyStream(void* context, void* event, void* stream) const {
  const ContextScope scope(*api_, context);
  GFSHIM_RETURN_IF_ERROR(check(api_->eventRecord(event, nullptr), "cuEventRecord (stream 0)"));
  return check(api_->streamWaitEvent(stream, event, 0), "cuStreamWaitEvent");
}

Status CudaDriver::waitEvent(void* context, void* event) const {
  const ContextScope scope(*api_, context);
  return check(api_->eventSynchronize(event), "cuEventSynchronize");
}

Status CudaDriver::synchronize(void* context, void* stream) const {
  const ContextScope scope(*api_, context);
  return check(api_->streamSynchronize(stream), "cuStreamSynchronize");
}

Status CudaDriver::pinHost(void* context, void* host, size_t bytes) const {
  const ContextScope scope(*api_, context);
  return check(api_->memHostRegister(host, bytes, kHostRegisterPortable), "cuMemHostRegister");
}

void CudaDriver::unpinHost(void* context, void* host) const {
  const ContextScope scope(*api_, context);
  api_->memHostUnregister(host);
}

}  // namespace gfshim
