// libgfshim_cuda.so: allreduces on GPU buffers through NCCL, behind the C table of
// src/gpu/gpu_plugin_api.h (the plugin's only exported symbol is gfshim_gpu_plugin_api).
//
// What one group holds: the world, row and column NCCL communicators (made from ids the shim
// distributed), one non-blocking CUDA stream (ordered at each call's start after the
// application's work on the legacy default stream and so on every blocking stream, but never
// after the other group's NCCL work: see prepare()), device scratch grown on demand, and the device
// residuals of CSC. Every call enqueues its work on that stream and waits for it (MPI_Allreduce
// semantics: the result is in recv on return), polling ncclCommGetAsyncError while it waits so a
// dead peer gives an error, not a hang. The communicators are nonblocking (config.blocking = 0):
// their initialisation advances only through the shim's polls (groupConnectPoll), so a rank can
// give up when a peer failed, and a collective call that returns ncclInProgress is settled before
// the next NCCL call.
//
// The shapes of one call (count N elements, p world ranks, grid R x C when torus):
//
//   exact ring    ncclAllReduce(send -> recv, N) on world              2(p-1)/p * N bytes/elt
//   exact torus   body = floor(N / R) * R elements, shard = N / R:
//                   row ncclReduceScatter(send -> recv + rowRank*shard, shard)
//                   column ncclAllReduce(shard, in place)
//                   row ncclAllGather(recv + rowRank*shard -> recv, in place)
//                 tail N - body (< R elements) by one world ncclAllReduce: correct for every N,
//                 count < R included (then the tail is everything)
//   fp16/bf16     runHalfWireSteps (src/compress/half_wire_steps.h) over DeviceHalfWire:
//                 [in place: copy send to scratch]  encode(send * 1/p or 1) -> wire (16 bits)
//                 ring or torus as above on the wire, in place, ncclFloat16 / ncclBfloat16
//                 decode(wire) * (p or 1) -> recv; any Inf/NaN in recv (identical on every
//                 rank) -> the exact float call from the kept input, record.overflowRedo (the
//                 redo does not ask whether the inputs already held Inf/NaN).
//   CSC           runCscSteps (src/compress/csc_steps.h), the control flow the host engine
//                 runs too, over this group's primitives (DeviceCsc): agree sparse, dense or
//                 cannot run (one int, world MAX), residual += send with chunk norms (kernel),
//                 world ncclAllReduce of the norms (exact), top-k selection (kernel), gather,
//                 the dense step above on the packed values (packed -> summed, so no input
//                 copy), scatter into recv and clear the selected residual chunks (kernel).
//   fused bucket  one gather kernel packs the operations into the bucket, the exact or the
//                 fp16/bf16 shape above runs on it in place, one scatter kernel unpacks it
//                 (CSC buckets never come here: the shim stages them)
//
// Scratch is allocated before anything of a call is enqueued, stream-ordered where the device
// has memory pools (a cudaFree would synchronize the whole device, and so wait for the other
// NCCL group's kernels, whose peers may be waiting for this rank). No rank fails alone for want
// of memory, which would leave its peers inside a collective until the deadline: CSC reserves
// both its sparse and its dense scratch before its agreement (a rank that cannot get the sparse
// one asks for a dense call; one that cannot get the dense one makes the call decline on every
// rank), and a 16-bit call or a fused bucket that asks for more scratch than every rank is known
// to hold agrees first whether all got it (reserveAgreed; it declines on every rank if not).
// Exact calls need none. A declined call has sent nothing but its agreement: the shim stages it.
// Any failure after the first enqueue marks the group broken: the ranks no longer agree on what
// was delivered, so the call aborts the communicators and waits for its stream before it
// returns, and further calls fail.
//
// Cost beyond NCCL's: one host wait per call (two for fp16/bf16: the overflow flag; two for a
// sparse CSC call, and for a call whose scratch grows: the agreement), kernels that each read
// and write their data once, and no allocation once the largest call of each kind has been
// seen.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "compress/csc.h"
#include "compress/csc_residual_book.h"
#include "compress/csc_steps.h"
#include "compress/half_wire_steps.h"
#include "gpu/gpu_plugin_api.h"
#include "gpu_kernels.h"
#include "nccl_library.h"

namespace gfshim::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "the ABI's id size is NCCL's");

// ---- Errors -------------------------------------------------------------------------------------

Status cudaFailure(const char* what, cudaError_t error) {
  return Status::error(StatusCode::kInternal, std::string(what) + ": " + cudaGetErrorString(error));
}

#define GFSHIM_CUDA_RETURN_IF_ERROR(what, expr)                     \
  do {                                                              \
    const cudaError_t gfshim_cuda_error_ = (expr);                  \
    if (gfshim_cuda_error_ != cudaSuccess) {                        \
      return ::gfshim::cuda::cudaFailure(what, gfshim_cuda_error_); \
    }                                                               \
  } while (0)

// The kernel launchers of gpu_kernels.h return a cudaError_t as int.
#define GFSHIM_KERNEL_RETURN_IF_ERROR(what, expr) \
  GFSHIM_CUDA_RETURN_IF_ERROR(what, static_cast<cudaError_t>(expr))

// ---- Small device helpers -----------------------------------------------------------------------

// The driver's current-context calls, from the libcuda.so.1 the CUDA runtime loaded (the plugin
// does not link the driver: it must load on machines without one, to say why it cannot run).
struct ContextCalls {
  int (*get)(void** context) = nullptr;
  int (*set)(void* context) = nullptr;
};
const ContextCalls* contextCalls() {
  static const ContextCalls* calls = []() -> const ContextCalls* {
    static ContextCalls found;
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (driver == nullptr) return nullptr;
    found.get = reinterpret_cast<int (*)(void**)>(dlsym(driver, "cuCtxGetCurrent"));
    found.set = reinterpret_cast<int (*)(void*)>(dlsym(driver, "cuCtxSetCurrent"));
    return found.get != nullptr && found.set != nullptr ? &found : nullptr;
  }();
  return calls;
}

// Makes `device`'s primary context current for the scope and restores the caller's context
// afterwards, also "none" (a thread without a context, such as the shim's fusion thread): the
// runtime's cudaGetDevice would report device 0 there, and restoring that would create a
// context on GPU 0 in every rank's process.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (calls_ != nullptr) {
      calls_->set(savedContext_);
    } else if (savedDevice_ >= 0) {
      cudaSetDevice(savedDevice_);
    }
  }
  Status enter(int device) {
    const ContextCalls* calls = contextCalls();
    if (calls != nullptr && calls->get(&savedContext_) == 0) {
      calls_ = calls;
    } else {
      GFSHIM_CUDA_RETURN_IF_ERROR("cudaGetDevice", cudaGetDevice(&savedDevice_));
    }
    GFSHIM_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(device));
    return Status::ok();
  }

 private:
  const ContextCalls* calls_ = nullptr;
  void* savedContext_ = nullptr;
  int savedDevice_ = -1;
};

// A failed cudaMalloc leaves its error for the next cudaGetLastError, which the kernel
// launchers read: consume it, so a refused allocation does not fail an unrelated launch.
void clearAllocationError() { (void)cudaGetLastError(); }

// Where a group's device memory comes from: stream-ordered (cudaMallocAsync / cudaFreeAsync on
// the group's stream) where the device has memory pools, so growing a buffer never synchronizes
// the device: a cudaFree would wait for every kernel on the GPU, including the other NCCL group's
// (the shim's fusion thread has its own), whose peers may be waiting for this rank. Plain
// cudaMalloc / cudaFree otherwise.
struct DeviceMemory {
  cudaStream_t stream = nullptr;
  bool streamOrdered = false;
  cudaError_t allocate(void** data, size_t bytes) const {
    return streamOrdered ? cudaMallocAsync(data, bytes, stream) : cudaMalloc(data, bytes);
  }
  void release(void* data) const {
    if (data == nullptr) return;
    if (streamOrdered) {
      cudaFreeAsync(data, stream);
    } else {
      cudaFree(data);
    }
  }
};

// Device memory that only grows; contents are not kept across growth. Grown only while the
// group's stream is idle. Released by the group (release()) before its stream is destroyed.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const DeviceMemory& memory) : memory_(memory) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  Status reserve(size_t bytes, const char* what) {
    if (bytes <= bytes_) return Status::ok();
    release();
    // Half again on growth, so a slowly growing call size does not reallocate every time.
    const size_t grown = bytes_ + bytes_ / 2;
    size_t target = std::max(bytes, grown);
    void* data = nullptr;
    cudaError_t error = memory_.allocate(&data, target);
    if (error != cudaSuccess && target > bytes) {
      clearAllocationError();
      target = bytes;
      error = memory_.allocate(&data, target);
    }
    if (error != cudaSuccess) {
      clearAllocationError();
      return Status::error(StatusCode::kOutOfMemory, std::string("device allocation of ") +
                                                         std::to_string(bytes) + " bytes for " +
                                                         what + ": " + cudaGetErrorString(error));
    }
    data_ = data;
    bytes_ = target;
    return Status::ok();
  }
  void release() {
    memory_.release(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  // The most every rank of the group is known to hold (NcclGroup::reserveAgreed): the same on
  // every rank, since every rank's calls ask for the same sizes and the agreements are shared.
  size_t agreed() const { return agreed_; }
  void agreedUpTo(size_t bytes) { agreed_ = std::max(agreed_, bytes); }
  void forgetAgreed() { agreed_ = 0; }  // some rank may have released it (a failed growth)

 private:
  const DeviceMemory& memory_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t agreed_ = 0;
};

// One buffer a call needs, and how much of it.
struct ScratchAsk {
  DeviceBuffer* buffer;
  size_t bytes;
  const char* what;
};

// ---- Residuals of CSC, in device memory ---------------------------------------------------------

// Device floats, released through the group's DeviceMemory.
struct DeviceFloatsRelease {
  const DeviceMemory* memory;
  void operator()(float* values) const { memory->release(values); }
};

struct DeviceResidual {
  std::unique_ptr<float, DeviceFloatsRelease> values;  // `count` floats, zero when created
  size_t count = 0;
  int64_t callsSeen = 0;
};

// The residual store's rules (src/compress/csc_residual_book.h), shared with the host, over device
// memory: one entry per residual key (the user's recv address) in this group. No entry for an
// empty buffer (a call of count 0 never reaches CSC here).
class DeviceResidualStore {
 public:
  DeviceResidualStore(uint64_t capBytes, const DeviceMemory& memory)
      : book_(capBytes), memory_(memory) {}
  DeviceResidualStore(const DeviceResidualStore&) = delete;
  DeviceResidualStore& operator=(const DeviceResidualStore&) = delete;
  void release() { book_.clear(); }  // before the group's stream goes (stream-ordered frees)

  // *entry = the key's residual, created zeroed (on `stream`) if absent; nullptr when refused by
  // the cap or by the allocator. Errors only when zeroing a new entry fails.
  Status findOrCreate(uintptr_t key, size_t count, cudaStream_t stream, DeviceResidual** entry) {
    bool fits = false;
    *entry = book_.find(key, count, &fits);
    if (*entry != nullptr || !fits || count == 0) return Status::ok();
    void* values = nullptr;
    if (memory_.allocate(&values, count * sizeof(float)) != cudaSuccess) {
      clearAllocationError();
      return Status::ok();
    }
    DeviceResidual created;
    created.values = {static_cast<float*>(values), DeviceFloatsRelease{&memory_}};
    created.count = count;
    const cudaError_t error = cudaMemsetAsync(values, 0, count * sizeof(float), stream);
    if (error != cudaSuccess) return cudaFailure("cudaMemsetAsync of a new CSC residual", error);
    *entry = book_.add(key, std::move(created));
    return Status::ok();
  }

 private:
  CscResidualBook<uintptr_t, DeviceResidual> book_;
  const DeviceMemory& memory_;
};

// ---- Types and wire accounting ------------------------------------------------------------------

bool ncclTypeOf(DType dtype, ncclDataType_t* type) {
  switch (dtype) {
    case DType::kInt8:
      *type = ncclInt8;
      return true;
    case DType::kUInt8:
      *type = ncclUint8;
      return true;
    case DType::kInt32:
      *type = ncclInt32;
      return true;
    case DType::kUInt32:
      *type = ncclUint32;
      return true;
    case DType::kInt64:
      *type = ncclInt64;
      return true;
    case DType::kUInt64:
      *type = ncclUint64;
      return true;
    case DType::kFloat32:
      *type = ncclFloat32;
      return true;
    case DType::kFloat64:
      *type = ncclFloat64;
      return true;
    default:
      return false;
  }
}

bool ncclOpOf(RedOp op, ncclRedOp_t* nccl);

// Both, or why not.
Status ncclTypeAndOp(DType dtype, RedOp op, ncclDataType_t* type, ncclRedOp_t* nccl) {
  if (ncclTypeOf(dtype, type) && ncclOpOf(op, nccl)) return Status::ok();
  return Status::error(StatusCode::kUnsupported, std::string("NCCL does not reduce ") +
                                                     dtypeName(dtype) + " with " + redOpName(op));
}

bool ncclOpOf(RedOp op, ncclRedOp_t* nccl) {
  switch (op) {
    case RedOp::kSum:
      *nccl = ncclSum;
      return true;
    case RedOp::kProd:
      *nccl = ncclProd;
      return true;
    case RedOp::kMax:
      *nccl = ncclMax;
      return true;
    case RedOp::kMin:
      *nccl = ncclMin;
      return true;
    default:
      return false;
  }
}

// (ranks - 1) / ranks of `bytes`, what one rank sends in a ring reduce-scatter or allgather of
// `bytes` in total, without overflowing the product.
uint64_t ringPhaseBytes(int ranks, uint64_t bytes) {
  if (ranks <= 1) return 0;
  const uint64_t p = static_cast<uint64_t>(ranks);
  return bytes / p * (p - 1) + bytes % p * (p - 1) / p;
}
uint64_t ringAllreduceBytes(int ranks, uint64_t bytes) { return 2 * ringPhaseBytes(ranks, bytes); }

HalfFormat halfFormatOf(WireCodec codec) {
  return codec == WireCodec::kBf16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
}

// ---- The group ----------------------------------------------------------------------------------

class NcclGroup {
 public:
  NcclGroup(const NcclLibrary& nccl, const GpuGroupSpec& spec)
      : nccl_(nccl), spec_(spec), residuals_(spec.cscMaxResidualBytes, memory_) {}
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  ~NcclGroup();

  // The stream and the small buffers, then the communicators (world, row, column). The caller
  // has made spec.device current. On failure the destructor frees what was made.
  Status prepare();  // local: stream and device memory
  // Collective, nonblocking: starts the world communicator's initialisation; connectPoll
  // advances it to the row's and the column's and says kGpuConnectDone when all are made.
  Status connectStart();
  GpuConnectState connectPoll(Status* failure);
  // The next destruction aborts the communicators instead of destroying them collectively.
  void markBroken() { broken_ = true; }
  // After a call failed past its first NCCL operation: aborts the communicators (their kernels
  // end) and waits for the stream, so no kernel of the call writes to user memory afterwards.
  void abortAfterFailure();
  // One blocking allreduce (see the top of the file); device already current.
  Status allreduce(const GpuCall& call, GpuCallRecord* record);
  // One fused bucket: gather (one launch), allreduce in place (exact, or 16 bits on the wire),
  // scatter (one launch).
  Status fusedAllreduce(const GpuFusedCall& call, GpuCallRecord* record);

  int device() const { return spec_.device; }

 private:
  struct Comm {
    ncclComm_t comm = nullptr;
    const char* name = "";
  };

  Status ncclFailure(const char* what, const Comm& comm, ncclResult_t result);
  // Whether a call may start: the group is not broken, and a torus call has a grid.
  Status checkUsable(bool torus) const;
  // ncclCommInitRankConfig(blocking = 0): returns once the initialisation started.
  Status startInit(Comm* comm, const char* name, int ranks, const uint8_t* id, int rank);
  // The communicator that is being initialised (connectStart .. kGpuConnectDone), or null.
  Comm* initialising();
  // After a call on a nonblocking communicator: waits while it reports ncclInProgress (the
  // operation is still being enqueued) and turns any other error into a Status.
  Status settle(const char* what, const Comm& comm, ncclResult_t result);
  // Starts a call: its deadline (spec.timeoutSec), and the stream's order after the work queued
  // so far on the legacy default stream, which waits for every blocking stream (a per-thread
  // default stream included), as a synchronous copy would be ordered. pastDeadline says
  // whether the deadline has passed.
  Status startCall();
  Status pastDeadline(const char* what) const;
  // ncclCommFinalize, waited for at most kFinalizeSeconds; false if it did not finish cleanly.
  bool finalize(const Comm& comm);
  // Waits for the stream, watching every communicator for an asynchronous NCCL error, also after
  // the stream drained.
  Status waitForStream(const char* what);

  // Enqueues recv = op over the world of send, ring or torus (see the top of the file).
  Status enqueueAllreduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                          size_t elementBytes, ncclRedOp_t op, bool torus, uint64_t* wireBytes);
  // What the dense float sum of a lossy call needs (nothing for an exact one).
  std::vector<ScratchAsk> denseScratch(const GpuCall& call, size_t count, bool inPlace);
  // Reserves `asks`. Where one asks for more than every rank is known to hold, the ranks agree
  // (one world MAX) whether all got theirs, before anything of the call is sent: if one did
  // not, every rank's call fails alike with *declined set (record->declinedEverywhere), and the
  // caller may run it another way. A failure alone before the first collective would leave the
  // peers inside theirs until the deadline.
  Status reserveAgreed(const std::vector<ScratchAsk>& asks, GpuCallRecord* record);
  // The dense float sum of a lossy call: exact, or 16 bits on the wire with the overflow redo
  // (which waits for the stream once): runHalfWireSteps over DeviceHalfWire. Scratch reserved as
  // denseScratch asks. The caller waits for the rest.
  Status enqueueDenseLossy(const GpuCall& call, const float* send, float* recv, size_t count,
                           GpuCallRecord* record);
  Status runExact(const GpuCall& call, GpuCallRecord* record);
  Status runCodec(const GpuCall& call, GpuCallRecord* record);
  // runCscSteps over DeviceCsc.
  Status runCsc(const GpuCall& call, GpuCallRecord* record);
  // The shared drivers' primitives on this group (src/compress/half_wire_steps.h, csc_steps.h).
  class DeviceHalfWire;
  class DeviceCsc;
  // The world MAX of one int of each rank (`what` names it in errors); waits for the stream.
  Status agreeMax(const char* what, int mine, int* agreed, GpuCallRecord* record);

  const NcclLibrary& nccl_;
  const GpuGroupSpec spec_;
  Comm world_, row_, column_;
  cudaStream_t stream_ = nullptr;
  int* deviceInts_ = nullptr;         // [0] overflow flag, [1] agreements (agreeMax)
  int* hostInts_ = nullptr;           // pinned, the same two
  cudaEvent_t entryEvent_ = nullptr;  // recorded on the legacy stream at each call's start
  bool broken_ = false;  // a call failed after its first enqueue, or a peer did not connect
  enum class Stage { kPrepared, kWorld, kRow, kColumn, kConnected };
  Stage stage_ = Stage::kPrepared;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();

  DeviceMemory memory_;                  // set up by prepare(); the buffers below use it
  DeviceBuffer halfWire_{memory_};       // uint16 values on the wire
  DeviceBuffer inputCopy_{memory_};      // the input of an in-place 16-bit call, for the redo
  DeviceBuffer norms_{memory_};          // CSC: float per chunk
  DeviceBuffer selected_{memory_};       // CSC: uint32 chunk index per selected chunk
  DeviceBuffer packedOffsets_{memory_};  // CSC: uint64, selected + 1
  DeviceBuffer packed_{memory_};         // CSC: the selected chunks of the residual
  DeviceBuffer summed_{memory_};         // CSC: their sum over ranks
  DeviceBuffer selectScratch_{memory_};  // CSC: selectTopChunksDevice's scratch
  DeviceResidualStore residuals_;
  DeviceBuffer bucket_{memory_};       // fused: the packed operations
  DeviceBuffer sliceTables_{memory_};  // fused: gather then scatter FusionSlice tables
  std::vector<FusionSlice> slices_;    // fused: host copy of both tables
};

NcclGroup::~NcclGroup() {
  // A group that never connected everywhere, or whose peers no longer agree on what was
  // delivered, may never finish: abort. Otherwise drain the stream, then finalize and destroy.
  if (stage_ != Stage::kConnected) broken_ = true;
  if (stream_ != nullptr && !broken_) {
    try {
      if (!startCall().isOk() || !waitForStream("groupDestroy").isOk()) broken_ = true;
    } catch (...) {  // an error message that could not be allocated
      broken_ = true;
    }
  }
  for (Comm* comm : {&column_, &row_, &world_}) {
    if (comm->comm == nullptr) continue;
    if (broken_ || !finalize(*comm)) {
      nccl_.commAbort(comm->comm);
      broken_ = true;  // one finalize that did not finish: the others would wait as long
    } else {
      // Final even when it reports an error: NCCL may have freed the communicator already, so
      // an abort after it could touch freed memory.
      (void)nccl_.commDestroy(comm->comm);
    }
    comm->comm = nullptr;
  }
  // Stream-ordered frees need the stream: every buffer goes before it (the device is current,
  // groupDestroy).
  for (DeviceBuffer* buffer : {&halfWire_, &inputCopy_, &norms_, &selected_, &packedOffsets_,
                               &packed_, &summed_, &selectScratch_, &bucket_, &sliceTables_}) {
    buffer->release();
  }
  residuals_.release();
  if (entryEvent_ != nullptr) cudaEventDestroy(entryEvent_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (deviceInts_ != nullptr) cudaFree(deviceInts_);
  if (hostInts_ != nullptr) cudaFreeHost(hostInts_);
}

void NcclGroup::abortAfterFailure() {
  if (!broken_) return;  // the call failed before anything was enqueued: nothing runs
  for (Comm* comm : {&column_, &row_, &world_}) {
    if (comm->comm != nullptr) nccl_.commAbort(comm->comm);
    comm->comm = nullptr;
  }
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
}

Status NcclGroup::startCall() {
  deadline_ = spec_.timeoutSec > 0
                  ? std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(spec_.timeoutSec))
                  : std::chrono::steady_clock::time_point::max();
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaEventRecord (legacy stream)",
                              cudaEventRecord(entryEvent_, cudaStreamLegacy));
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, entryEvent_, 0));
  return Status::ok();
}

Status NcclGroup::pastDeadline(const char* what) const {
  if (std::chrono::steady_clock::now() < deadline_) return Status::ok();
  char text[160];
  std::snprintf(text, sizeof text,
                "%s did not complete within %g s (GFSHIM_NCCL_TIMEOUT_SEC): a peer may have "
                "failed or stopped calling",
                what, spec_.timeoutSec);
  return Status::error(StatusCode::kTransportError, text);
}

Status NcclGroup::ncclFailure(const char* what, const Comm& comm, ncclResult_t result) {
  std::string message = std::string(what) + " (" + comm.name + "): " + nccl_.errorString(result);
  ncclResult_t asyncError = ncclSuccess;
  if (comm.comm != nullptr && nccl_.commGetAsyncError(comm.comm, &asyncError) == ncclSuccess &&
      asyncError != ncclSuccess && asyncError != result) {
    message += "; async error " + nccl_.errorString(asyncError);
  }
  return Status::error(StatusCode::kTransportError, message);
}

Status NcclGroup::checkUsable(bool torus) const {
  if (broken_) {
    return Status::error(StatusCode::kInternal,
                         "an earlier call on this NCCL group failed after it started sending");
  }
  if (torus && row_.comm == nullptr) {
    return Status::error(StatusCode::kInvalidArgument,
                         "torus allreduce on a group made without a grid (rowSize 0)");
  }
  return Status::ok();
}

Status NcclGroup::startInit(Comm* comm, const char* name, int ranks, const uint8_t* id, int rank) {
  comm->name = name;
  ncclUniqueId uniqueId;
  std::memcpy(&uniqueId, id, sizeof uniqueId);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t made = nullptr;
  const ncclResult_t result = nccl_.commInitRankConfig(&made, ranks, uniqueId, rank, &config);
  comm->comm = made;  // also when it failed: the destructor aborts it
  if (result != ncclSuccess && result != ncclInProgress) {
    return ncclFailure("ncclCommInitRankConfig", *comm, result);
  }
  return Status::ok();
}

NcclGroup::Comm* NcclGroup::initialising() {
  switch (stage_) {
    case Stage::kWorld:
      return &world_;
    case Stage::kRow:
      return &row_;
    case Stage::kColumn:
      return &column_;
    default:
      return nullptr;
  }
}

Status NcclGroup::settle(const char* what, const Comm& comm, ncclResult_t result) {
  while (result == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = nccl_.commGetAsyncError(comm.comm, &state);
    if (query != ncclSuccess) return ncclFailure("ncclCommGetAsyncError", comm, query);
    if (state != ncclInProgress) {
      result = state;
      break;
    }
    GFSHIM_RETURN_IF_ERROR(pastDeadline(what));
    std::this_thread::yield();
  }
  if (result != ncclSuccess) return ncclFailure(what, comm, result);
  return Status::ok();
}

bool NcclGroup::finalize(const Comm& comm) {
  constexpr double kFinalizeSeconds = 10;
  ncclResult_t result = nccl_.commFinalize(comm.comm);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kFinalizeSeconds);
  while (result == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    ncclResult_t state = ncclSuccess;
    if (nccl_.commGetAsyncError(comm.comm, &state) != ncclSuccess) return false;
    result = state;
    if (result == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return result == ncclSuccess;
}

Status NcclGroup::prepare() {
  // Non-blocking: the event each call waits for (startCall) is recorded on the legacy default
  // stream, which waits for every blocking stream. Were this stream blocking, a call would also
  // wait for the NCCL work in flight on the other group of this GPU (blocking calls and the
  // fusion thread's buckets each have one), and with the two started in different orders on
  // two ranks, each GPU would wait for the other's: a deadlock until the deadline. Work the
  // application queues on the legacy stream after a call does not wait for it either.
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaStreamCreateWithFlags",
                              cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  int pools = 0;
  GFSHIM_CUDA_RETURN_IF_ERROR(
      "cudaDeviceGetAttribute (memory pools)",
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, spec_.device));
  memory_.stream = stream_;
  memory_.streamOrdered = pools != 0;
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaEventCreateWithFlags",
                              cudaEventCreateWithFlags(&entryEvent_, cudaEventDisableTiming));
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaMalloc of the group's flags",
                              cudaMalloc(reinterpret_cast<void**>(&deviceInts_), 2 * sizeof(int)));
  GFSHIM_CUDA_RETURN_IF_ERROR(
      "cudaMallocHost of the group's flags",
      cudaMallocHost(reinterpret_cast<void**>(&hostInts_), 2 * sizeof(int)));
  return Status::ok();
}

Status NcclGroup::connectStart() {
  if (stage_ != Stage::kPrepared) {
    return Status::error(StatusCode::kInternal, "groupConnectStart called twice");
  }
  stage_ = Stage::kWorld;
  return startInit(&world_, "world", spec_.worldSize, spec_.worldId, spec_.worldRank);
}

GpuConnectState NcclGroup::connectPoll(Status* failure) {
  Comm* comm = initialising();
  if (comm == nullptr) {
    if (stage_ == Stage::kConnected) return kGpuConnectDone;
    *failure = Status::error(StatusCode::kInternal, "groupConnectPoll before groupConnectStart");
    return kGpuConnectFailed;
  }
  ncclResult_t state = ncclSuccess;
  const ncclResult_t query = nccl_.commGetAsyncError(comm->comm, &state);
  if (query != ncclSuccess) state = query;
  if (state == ncclInProgress) return kGpuConnectPending;
  if (state != ncclSuccess) {
    *failure = ncclFailure("ncclCommInitRankConfig", *comm, state);
    return kGpuConnectFailed;
  }
  // This communicator is made: the same order on every rank, so no rank waits in a row or
  // column initialisation that a peer has not reached after finishing the world's.
  Status started = Status::ok();
  if (stage_ == Stage::kWorld && spec_.rowSize > 0) {
    stage_ = Stage::kRow;
    started = startInit(&row_, "row", spec_.rowSize, spec_.rowId, spec_.rowRank);
  } else if (stage_ == Stage::kRow) {
    stage_ = Stage::kColumn;
    started = startInit(&column_, "column", spec_.colSize, spec_.colId, spec_.colRank);
  } else {
    stage_ = Stage::kConnected;
    return kGpuConnectDone;
  }
  if (!started.isOk()) {
    *failure = started;
    return kGpuConnectFailed;
  }
  return kGpuConnectPending;
}

Status NcclGroup::waitForStream(const char* what) {
  // Polls: yielding for the first 200 us (short calls return fast), then every 20 us, so a long
  // allreduce does not keep a core busy.
  const auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state != cudaSuccess && state != cudaErrorNotReady) {
      return cudaFailure((std::string("cudaStreamQuery after ") + what).c_str(), state);
    }
    // Asked also once the stream has drained: a collective that a failure ended (a peer's
    // abort, a broken link) completes without its result, so only the error tells.
    for (const Comm* comm : {&world_, &row_, &column_}) {
      if (comm->comm == nullptr) continue;
      ncclResult_t asyncError = ncclSuccess;
      const ncclResult_t result = nccl_.commGetAsyncError(comm->comm, &asyncError);
      if (result != ncclSuccess) return ncclFailure("ncclCommGetAsyncError", *comm, result);
      if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
        return ncclFailure((std::string("asynchronous error during ") + what).c_str(), *comm,
                           asyncError);
      }
    }
    if (state == cudaSuccess) return Status::ok();
    GFSHIM_RETURN_IF_ERROR(pastDeadline(what));
    if (std::chrono::steady_clock::now() < spinUntil) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

Status NcclGroup::enqueueAllreduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                   size_t elementBytes, ncclRedOp_t op, bool torus,
                                   uint64_t* wireBytes) {
  if (count == 0) return Status::ok();
  const auto* sendBytes = static_cast<const char*>(send);
  auto* recvBytes = static_cast<char*>(recv);
  size_t body = 0;  // elements reduced by the torus phases; the rest by one world allreduce
  if (torus) {
    const size_t rowSize = static_cast<size_t>(spec_.rowSize);
    const size_t shard = count / rowSize;
    body = shard * rowSize;
    if (shard > 0) {
      // recv + rowRank * shard: NCCL's in-place reduce-scatter when send == recv, and the
      // in-place allgather's source in every case.
      char* mine = recvBytes + static_cast<size_t>(spec_.rowRank) * shard * elementBytes;
      GFSHIM_RETURN_IF_ERROR(
          settle("ncclReduceScatter", row_,
                 nccl_.reduceScatter(send, mine, shard, type, op, row_.comm, stream_)));
      GFSHIM_RETURN_IF_ERROR(
          settle("ncclAllReduce", column_,
                 nccl_.allReduce(mine, mine, shard, type, op, column_.comm, stream_)));
      GFSHIM_RETURN_IF_ERROR(settle("ncclAllGather", row_,
                                    nccl_.allGather(mine, recv, shard, type, row_.comm, stream_)));
      const uint64_t bodyBytes = static_cast<uint64_t>(body) * elementBytes;
      *wireBytes += 2 * ringPhaseBytes(spec_.rowSize, bodyBytes) +
                    ringAllreduceBytes(spec_.colSize, static_cast<uint64_t>(shard) * elementBytes);
    }
  }
  const size_t tail = count - body;
  if (tail > 0) {
    const size_t offset = body * elementBytes;
    GFSHIM_RETURN_IF_ERROR(settle("ncclAllReduce", world_,
                                  nccl_.allReduce(sendBytes + offset, recvBytes + offset, tail,
                                                  type, op, world_.comm, stream_)));
    *wireBytes += ringAllreduceBytes(spec_.worldSize, static_cast<uint64_t>(tail) * elementBytes);
  }
  return Status::ok();
}

std::vector<ScratchAsk> NcclGroup::denseScratch(const GpuCall& call, size_t count, bool inPlace) {
  std::vector<ScratchAsk> asks;
  if (call.codec == WireCodec::kNone) return asks;
  asks.push_back({&halfWire_, count * sizeof(uint16_t), "the 16-bit wire values"});
  if (inPlace) asks.push_back({&inputCopy_, count * sizeof(float), "the input copy"});
  return asks;
}

namespace {

Status reserveAll(const std::vector<ScratchAsk>& asks) {
  for (const ScratchAsk& ask : asks)
    GFSHIM_RETURN_IF_ERROR(ask.buffer->reserve(ask.bytes, ask.what));
  return Status::ok();
}

}  // namespace

Status NcclGroup::reserveAgreed(const std::vector<ScratchAsk>& asks, GpuCallRecord* record) {
  const bool agree = std::any_of(asks.begin(), asks.end(), [](const ScratchAsk& ask) {
    return ask.bytes > ask.buffer->agreed();
  });
  const Status reserved = reserveAll(asks);
  if (!agree) return reserved;  // within what every rank holds: nothing was allocated
  if (!reserved.isOk() && reserved.code() != StatusCode::kOutOfMemory) return reserved;
  int failedSomewhere = 0;
  broken_ = true;  // the agreement is the call's first collective
  GFSHIM_RETURN_IF_ERROR(
      agreeMax("the scratch agreement", reserved.isOk() ? 0 : 1, &failedSomewhere, record));
  broken_ = false;
  for (const ScratchAsk& ask : asks) {
    if (failedSomewhere == 0) {
      ask.buffer->agreedUpTo(ask.bytes);
    } else {
      ask.buffer->forgetAgreed();
    }
  }
  if (failedSomewhere == 0) return Status::ok();
  record->declinedEverywhere = true;
  return !reserved.isOk() ? reserved
                          : Status::error(StatusCode::kOutOfMemory,
                                          "another rank has no device memory for this call");
}

// runHalfWireSteps' primitives: NCCL on the group's stream and the codec kernels.
class NcclGroup::DeviceHalfWire final : public HalfWireBackend {
 public:
  DeviceHalfWire(NcclGroup& group, bool torus, GpuCallRecord* record)
      : group_(group), torus_(torus), record_(record) {}
  Status exactSum(const float* in, float* out, size_t count) override {
    return group_.enqueueAllreduce(in, out, count, ncclFloat32, sizeof(float), ncclSum, torus_,
                                   &record_->wireBytes);
  }
  Status keepInput(const float* in, size_t count, const float** kept) override {
    float* copy = group_.inputCopy_.as<float>();
    GFSHIM_CUDA_RETURN_IF_ERROR(
        "cudaMemcpyAsync of the input",
        cudaMemcpyAsync(copy, in, count * sizeof(float), cudaMemcpyDeviceToDevice, group_.stream_));
    *kept = copy;
    return Status::ok();
  }
  // NCCL sums the 16-bit values themselves, in place on the wire buffer.
  Status compressedSum(HalfFormat format, float encodeScale, float decodeScale, const float* in,
                       float* out, size_t count) override {
    uint16_t* wire = group_.halfWire_.as<uint16_t>();
    GFSHIM_KERNEL_RETURN_IF_ERROR(
        "encodeHalfDevice", encodeHalfDevice(format, in, encodeScale, wire, count, group_.stream_));
    const ncclDataType_t wireType = format == HalfFormat::kFp16 ? ncclFloat16 : ncclBfloat16;
    GFSHIM_RETURN_IF_ERROR(group_.enqueueAllreduce(wire, wire, count, wireType, sizeof(uint16_t),
                                                   ncclSum, torus_, &record_->wireBytes));
    GFSHIM_KERNEL_RETURN_IF_ERROR("decodeHalfDevice", decodeHalfDevice(format, wire, decodeScale,
                                                                       out, count, group_.stream_));
    return Status::ok();
  }
  // A device flag copied to the host: the one host wait of a 16-bit call.
  Status anyNonFinite(const float* values, size_t count, bool* found) override {
    int* flag = &group_.deviceInts_[0];
    GFSHIM_CUDA_RETURN_IF_ERROR("cudaMemsetAsync of the overflow flag",
                                cudaMemsetAsync(flag, 0, sizeof(int), group_.stream_));
    GFSHIM_KERNEL_RETURN_IF_ERROR("anyNonFiniteDevice",
                                  anyNonFiniteDevice(values, count, flag, group_.stream_));
    GFSHIM_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync of the overflow flag",
                                cudaMemcpyAsync(&group_.hostInts_[0], flag, sizeof(int),
                                                cudaMemcpyDeviceToHost, group_.stream_));
    GFSHIM_RETURN_IF_ERROR(group_.waitForStream("the 16-bit allreduce"));
    *found = group_.hostInts_[0] != 0;
    return Status::ok();
  }

 private:
  NcclGroup& group_;
  bool torus_;
  GpuCallRecord* record_;
};

Status NcclGroup::enqueueDenseLossy(const GpuCall& call, const float* send, float* recv,
                                    size_t count, GpuCallRecord* record) {
  HalfWireCall dense;
  dense.halfWire = call.codec != WireCodec::kNone;
  dense.format = halfFormatOf(call.codec);
  dense.prescale = call.prescale;
  dense.ranks = spec_.worldSize;
  DeviceHalfWire backend(*this, call.torus, record);
  bool redone = false;
  const Status status = runHalfWireSteps(dense, send, recv, count, backend, &redone);
  if (redone) record->overflowRedo = true;
  return status;
}

Status NcclGroup::runExact(const GpuCall& call, GpuCallRecord* record) {
  ncclDataType_t type;
  ncclRedOp_t op;
  GFSHIM_RETURN_IF_ERROR(ncclTypeAndOp(call.dtype, call.op, &type, &op));
  broken_ = true;  // until the call completes: see the top of the file
  GFSHIM_RETURN_IF_ERROR(enqueueAllreduce(call.send, call.recv, call.count, type,
                                          dtypeBytes(call.dtype), op, call.torus,
                                          &record->wireBytes));
  GFSHIM_RETURN_IF_ERROR(waitForStream("the allreduce"));
  broken_ = false;
  return Status::ok();
}

Status NcclGroup::fusedAllreduce(const GpuFusedCall& call, GpuCallRecord* record) {
  GFSHIM_RETURN_IF_ERROR(checkUsable(call.torus));
  GFSHIM_RETURN_IF_ERROR(startCall());
  ncclDataType_t type;
  ncclRedOp_t op;
  GFSHIM_RETURN_IF_ERROR(ncclTypeAndOp(call.dtype, call.op, &type, &op));
  const bool lossy = call.codec != WireCodec::kNone;
  if (lossy && (call.dtype != DType::kFloat32 || call.op != RedOp::kSum)) {
    return Status::error(StatusCode::kInvalidArgument, "lossy modes need float32 with sum");
  }
  // Both tables in one host vector: [0, n) gathers from the sends, [n, 2n) scatters to the recvs.
  const size_t n = call.opCount;
  const size_t elementBytes = dtypeBytes(call.dtype);
  slices_.resize(2 * n);
  uint64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (call.ops[i].bytes % elementBytes != 0) {
      return Status::error(
          StatusCode::kInvalidArgument,
          "fused operation of a partial element (" + std::to_string(call.ops[i].bytes) + " bytes)");
    }
    slices_[i] = FusionSlice{call.ops[i].send, offset, call.ops[i].bytes};
    slices_[n + i] = FusionSlice{call.ops[i].recv, offset, call.ops[i].bytes};
    offset += call.ops[i].bytes;
  }
  if (n == 0 || offset == 0) return Status::ok();
  const size_t count = offset / elementBytes;
  // The bucket as one lossy call on itself (in place: the input copy keeps it for a redo).
  GpuCall dense;
  dense.dtype = call.dtype;
  dense.op = call.op;
  dense.torus = call.torus;
  dense.codec = call.codec;
  dense.prescale = call.prescale;
  // Everything that can fail comes before the first collective, agreed where it is new.
  std::vector<ScratchAsk> asks = denseScratch(dense, count, true);
  asks.push_back({&bucket_, offset, "a fused bucket"});
  asks.push_back({&sliceTables_, 2 * n * sizeof(FusionSlice), "fusion tables"});
  GFSHIM_RETURN_IF_ERROR(reserveAgreed(asks, record));
  auto* tables = sliceTables_.as<FusionSlice>();
  void* bucket = bucket_.as<void>();
  GFSHIM_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync of the fusion tables",
                              cudaMemcpyAsync(tables, slices_.data(), 2 * n * sizeof(FusionSlice),
                                              cudaMemcpyHostToDevice, stream_));
  GFSHIM_KERNEL_RETURN_IF_ERROR("fusionGatherDevice",
                                fusionGatherDevice(tables, n, bucket, stream_));
  broken_ = true;  // until the call completes: see the top of the file
  if (lossy) {
    auto* values = static_cast<float*>(bucket);
    GFSHIM_RETURN_IF_ERROR(enqueueDenseLossy(dense, values, values, count, record));
  } else {
    GFSHIM_RETURN_IF_ERROR(enqueueAllreduce(bucket, bucket, count, type, elementBytes, op,
                                            call.torus, &record->wireBytes));
  }
  GFSHIM_KERNEL_RETURN_IF_ERROR("fusionScatterDevice",
                                fusionScatterDevice(tables + n, n, bucket, stream_));
  GFSHIM_RETURN_IF_ERROR(waitForStream("the fused allreduce"));
  broken_ = false;
  return Status::ok();
}

Status NcclGroup::runCodec(const GpuCall& call, GpuCallRecord* record) {
  const auto* send = static_cast<const float*>(call.send);
  auto* recv = static_cast<float*>(call.recv);
  GFSHIM_RETURN_IF_ERROR(reserveAgreed(denseScratch(call, call.count, send == recv), record));
  broken_ = true;
  GFSHIM_RETURN_IF_ERROR(enqueueDenseLossy(call, send, recv, call.count, record));
  GFSHIM_RETURN_IF_ERROR(waitForStream("the lossy allreduce"));
  broken_ = false;
  return Status::ok();
}

Status NcclGroup::agreeMax(const char* what, int mine, int* agreed, GpuCallRecord* record) {
  int* agreement = &deviceInts_[1];
  hostInts_[1] = mine;
  const std::string copy = std::string("cudaMemcpyAsync of ") + what;
  GFSHIM_CUDA_RETURN_IF_ERROR(copy.c_str(), cudaMemcpyAsync(agreement, &hostInts_[1], sizeof(int),
                                                            cudaMemcpyHostToDevice, stream_));
  GFSHIM_RETURN_IF_ERROR(
      settle((std::string("ncclAllReduce of ") + what).c_str(), world_,
             nccl_.allReduce(agreement, agreement, 1, ncclInt32, ncclMax, world_.comm, stream_)));
  record->wireBytes += ringAllreduceBytes(spec_.worldSize, sizeof(int));
  GFSHIM_CUDA_RETURN_IF_ERROR(copy.c_str(), cudaMemcpyAsync(&hostInts_[1], agreement, sizeof(int),
                                                            cudaMemcpyDeviceToHost, stream_));
  GFSHIM_RETURN_IF_ERROR(waitForStream(what));
  *agreed = hostInts_[1];
  return Status::ok();
}

// runCscSteps' primitives: device residuals and scratch, the CSC kernels and NCCL on the group's
// stream. The group is marked broken from the agreement (the call's first collective) until the
// stream has drained, and its scratch agreements learn what the dense reservation got.
class NcclGroup::DeviceCsc final : public CscBackend {
 public:
  DeviceCsc(NcclGroup& group, const GpuCall& call, GpuCallRecord* record)
      : group_(group),
        call_(call),
        record_(record),
        send_(static_cast<const float*>(call.send)),
        recv_(static_cast<float*>(call.recv)) {}

  Status reserveDense(size_t count) override {
    denseAsks_ = group_.denseScratch(call_, count, send_ == recv_);
    return reserveAll(denseAsks_);
  }
  Status findResidual(size_t count, int64_t** callsSeen) override {
    GFSHIM_RETURN_IF_ERROR(
        group_.residuals_.findOrCreate(call_.residualKey, count, group_.stream_, &entry_));
    *callsSeen = entry_ != nullptr ? &entry_->callsSeen : nullptr;
    return Status::ok();
  }
  Status reserveSparse(const CscShape& shape) override {
    GFSHIM_RETURN_IF_ERROR(group_.norms_.reserve(shape.chunks * sizeof(float), "the CSC norms"));
    GFSHIM_RETURN_IF_ERROR(
        group_.selected_.reserve(shape.selected * sizeof(uint32_t), "the CSC selection"));
    GFSHIM_RETURN_IF_ERROR(group_.packedOffsets_.reserve((shape.selected + 1) * sizeof(uint64_t),
                                                         "the CSC packed offsets"));
    GFSHIM_RETURN_IF_ERROR(
        group_.packed_.reserve(shape.maxPacked * sizeof(float), "the CSC packed values"));
    GFSHIM_RETURN_IF_ERROR(
        group_.summed_.reserve(shape.maxPacked * sizeof(float), "the CSC summed values"));
    GFSHIM_RETURN_IF_ERROR(group_.selectScratch_.reserve(selectTopChunksScratchBytes(shape.chunks),
                                                         "the CSC selection scratch"));
    return reserveAll(group_.denseScratch(call_, shape.maxPacked, false));
  }
  Status agree(CscReadiness mine, CscReadiness* agreed) override {
    group_.broken_ = true;  // from the first enqueue until the call completes
    int largest = 0;
    GFSHIM_RETURN_IF_ERROR(
        group_.agreeMax("the CSC agreement", static_cast<int>(mine), &largest, record_));
    *agreed = static_cast<CscReadiness>(largest);
    for (const ScratchAsk& ask : denseAsks_) {  // what the codec calls' agreements know
      if (*agreed == CscReadiness::kCannotRun) {
        ask.buffer->forgetAgreed();
      } else {
        ask.buffer->agreedUpTo(ask.bytes);
      }
    }
    // Declined: only the agreement ran, and it completed everywhere.
    if (*agreed == CscReadiness::kCannotRun) group_.broken_ = false;
    return Status::ok();
  }
  Status allreduceDense(size_t count) override {
    return group_.enqueueDenseLossy(call_, send_, recv_, count, record_);
  }
  // Never called: a GpuCall carries no momentum (the engine stages GPU buffers under momentum
  // correction, Engine::voteFor), so runCscSteps' shape.momentum is 0 here.
  Status allreduceDenseCorrected(const CscShape&) override { return noMomentum(); }
  Status momentumToGradient(const CscShape&) override { return noMomentum(); }
  Status addAndNorms(const CscShape& shape) override {
    GFSHIM_KERNEL_RETURN_IF_ERROR(
        "addAndChunkL1NormsDevice",
        addAndChunkL1NormsDevice(entry_->values.get(), send_, shape.count, shape.chunkElements,
                                 group_.norms_.as<float>(), group_.stream_));
    return Status::ok();
  }
  Status allreduceNorms(const CscShape& shape) override {
    float* norms = group_.norms_.as<float>();
    GFSHIM_RETURN_IF_ERROR(
        group_.settle("ncclAllReduce of the CSC norms", group_.world_,
                      group_.nccl_.allReduce(norms, norms, shape.chunks, ncclFloat32, ncclSum,
                                             group_.world_.comm, group_.stream_)));
    record_->wireBytes += ringAllreduceBytes(group_.spec_.worldSize, shape.chunks * sizeof(float));
    return Status::ok();
  }
  // On the device from the summed norms (no host copy of them, no host wait).
  Status selectTop(const CscShape& shape) override {
    GFSHIM_KERNEL_RETURN_IF_ERROR(
        "selectTopChunksDevice",
        selectTopChunksDevice(group_.norms_.as<float>(), shape.chunks, shape.selected,
                              group_.selected_.as<uint32_t>(), group_.selectScratch_.as<void>(),
                              group_.selectScratch_.bytes(), group_.stream_));
    return Status::ok();
  }
  // The packed length is known on the device only (whether the short last chunk was selected):
  // the sum runs over maxPacked elements with the unused end zeroed, so no host wait is needed.
  // The host's pack gives the exact length; recv gets the same values (the end is not unpacked).
  Status pack(const CscShape& shape, size_t* packedCount) override {
    float* packed = group_.packed_.as<float>();
    const size_t padFrom = shape.maxPacked - std::min(shape.maxPacked, shape.chunkElements);
    GFSHIM_CUDA_RETURN_IF_ERROR(
        "cudaMemsetAsync of the packed end",
        cudaMemsetAsync(packed + padFrom, 0, (shape.maxPacked - padFrom) * sizeof(float),
                        group_.stream_));
    GFSHIM_KERNEL_RETURN_IF_ERROR(
        "cscGatherDevice",
        cscGatherDevice(entry_->values.get(), shape.count, shape.chunkElements,
                        group_.selected_.as<uint32_t>(), shape.selected,
                        group_.packedOffsets_.as<uint64_t>(), packed, group_.stream_));
    *packedCount = shape.maxPacked;
    return Status::ok();
  }
  // packed -> summed, not in place: no input copy for the redo.
  Status allreducePacked(size_t packedCount) override {
    return group_.enqueueDenseLossy(call_, group_.packed_.as<float>(), group_.summed_.as<float>(),
                                    packedCount, record_);
  }
  Status unpackAndClear(const CscShape& shape) override {
    GFSHIM_KERNEL_RETURN_IF_ERROR(
        "cscScatterDevice", cscScatterDevice(group_.summed_.as<float>(), shape.count,
                                             shape.chunkElements, group_.selected_.as<uint32_t>(),
                                             shape.selected, group_.packedOffsets_.as<uint64_t>(),
                                             recv_, entry_->values.get(), group_.stream_));
    return Status::ok();
  }
  Status finish(bool sparse) override {
    GFSHIM_RETURN_IF_ERROR(
        group_.waitForStream(sparse ? "the sparse CSC call" : "the dense CSC call"));
    group_.broken_ = false;
    return Status::ok();
  }
  // Nothing to clear: a failure past the agreement breaks the group, which runs no further call,
  // so its residuals are never read again.
  void resetResidual() override {}

 private:
  static Status noMomentum() {
    return Status::error(StatusCode::kInternal, "no momentum correction on the NCCL path");
  }

  NcclGroup& group_;
  const GpuCall& call_;
  GpuCallRecord* record_;
  const float* send_;
  float* recv_;
  std::vector<ScratchAsk> denseAsks_;
  DeviceResidual* entry_ = nullptr;
};

Status NcclGroup::runCsc(const GpuCall& call, GpuCallRecord* record) {
  CscParams params;
  params.density = call.cscDensity;
  params.chunkElements = call.cscChunkElements;
  params.warmupCalls = call.cscWarmupCalls;
  DeviceCsc backend(*this, call, record);
  CscOutcome outcome;
  const Status status = runCscSteps(params, call.count, backend, &outcome);
  record->sparse = outcome.mode == CscMode::kSparse;
  record->chunks = outcome.chunks;
  record->selectedChunks = outcome.selectedChunks;
  record->declinedEverywhere = outcome.mode == CscMode::kDeclined;
  return status;
}

Status NcclGroup::allreduce(const GpuCall& call, GpuCallRecord* record) {
  GFSHIM_RETURN_IF_ERROR(checkUsable(call.torus && call.count > 0));
  GFSHIM_RETURN_IF_ERROR(startCall());
  if (call.count == 0) return Status::ok();
  if (call.send == nullptr || call.recv == nullptr) {
    return Status::error(StatusCode::kInvalidArgument, "null buffer with a non-zero count");
  }
  if (call.count > std::numeric_limits<size_t>::max() / 16) {
    return Status::error(StatusCode::kInvalidArgument, "element count too large");
  }
  const bool lossy = call.codec != WireCodec::kNone || call.cscDensity > 0;
  if (!lossy) return runExact(call, record);
  if (call.dtype != DType::kFloat32 || call.op != RedOp::kSum) {
    return Status::error(StatusCode::kInvalidArgument, "lossy modes need float32 with sum");
  }
  if (call.cscDensity > 0) return runCsc(call, record);
  return runCodec(call, record);
}

// ---- The C table --------------------------------------------------------------------------------

bool probe(int device, char* why, size_t whyBytes) noexcept {
  try {
    int devices = 0;
    const cudaError_t error = cudaGetDeviceCount(&devices);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      setWhy(why, whyBytes, "no CUDA device: %s", cudaGetErrorString(error));
      return false;
    }
    if (devices <= 0) {
      setWhy(why, whyBytes, "no CUDA device: cudaGetDeviceCount found none");
      return false;
    }
    if (device < 0 || device >= devices) {
      setWhy(why, whyBytes, "CUDA device %d is not one of the %d visible devices", device, devices);
      return false;
    }
    std::string message;
    if (loadNccl(&message) == nullptr) {
      setWhy(why, whyBytes, "%s", message.c_str());
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    setWhy(why, whyBytes, "probe: %s", e.what());
  } catch (...) {
    setWhy(why, whyBytes, "probe: unknown exception");
  }
  return false;
}

bool uniqueId(uint8_t id[kNcclUniqueIdBytes], char* why, size_t whyBytes) noexcept {
  try {
    std::string message;
    const NcclLibrary* nccl = loadNccl(&message);
    if (nccl == nullptr) {
      setWhy(why, whyBytes, "%s", message.c_str());
      return false;
    }
    ncclUniqueId made;
    const ncclResult_t result = nccl->getUniqueId(&made);
    if (result != ncclSuccess) {
      setWhy(why, whyBytes, "ncclGetUniqueId: %s", nccl->errorString(result).c_str());
      return false;
    }
    std::memcpy(id, &made, sizeof made);
    return true;
  } catch (const std::exception& e) {
    setWhy(why, whyBytes, "uniqueId: %s", e.what());
  } catch (...) {
    setWhy(why, whyBytes, "uniqueId: unknown exception");
  }
  return false;
}

// A rank and its communicator size make sense.
bool validPlace(int size, int rank) { return size > 0 && rank >= 0 && rank < size; }

bool groupPrepare(const GpuGroupSpec* spec, void** group, char* why, size_t whyBytes) noexcept {
  if (group != nullptr) *group = nullptr;
  try {
    if (spec == nullptr || group == nullptr) {
      setWhy(why, whyBytes, "groupPrepare: null spec or group");
      return false;
    }
    const bool grid = spec->rowSize > 0;
    if (spec->device < 0 || !validPlace(spec->worldSize, spec->worldRank) || spec->rowSize < 0 ||
        (grid &&
         (!validPlace(spec->rowSize, spec->rowRank) || !validPlace(spec->colSize, spec->colRank) ||
          static_cast<int64_t>(spec->rowSize) * spec->colSize != spec->worldSize))) {
      setWhy(why, whyBytes,
             "groupPrepare: invalid spec (device %d, world %d/%d, row %d/%d, column %d/%d)",
             spec->device, spec->worldRank, spec->worldSize, spec->rowRank, spec->rowSize,
             spec->colRank, spec->colSize);
      return false;
    }
    std::string message;
    const NcclLibrary* nccl = loadNccl(&message);
    if (nccl == nullptr) {
      setWhy(why, whyBytes, "%s", message.c_str());
      return false;
    }
    DeviceGuard guard;
    Status status = guard.enter(spec->device);
    std::unique_ptr<NcclGroup> made;
    if (status.isOk()) {
      made.reset(new NcclGroup(*nccl, *spec));
      status = made->prepare();
    }
    if (!status.isOk()) {
      made.reset();  // under the guard: frees on the group's device
      setWhy(why, whyBytes, "%s", status.message().c_str());
      return false;
    }
    *group = made.release();
    return true;
  } catch (const std::exception& e) {
    setWhy(why, whyBytes, "groupPrepare: %s", e.what());
  } catch (...) {
    setWhy(why, whyBytes, "groupPrepare: unknown exception");
  }
  return false;
}

// The frame of the entries on a made group: the group's device current for `body` (returning a
// Status), its failure or any exception written to *why (without allocating in the handlers).
template <typename Body>
bool onGroupDevice(const char* entry, NcclGroup* group, char* why, size_t whyBytes, Body body) {
  try {
    DeviceGuard guard;
    Status status = guard.enter(group->device());
    if (status.isOk()) status = body();
    if (status.isOk()) return true;
    setWhy(why, whyBytes, "%s", status.message().c_str());
  } catch (const std::exception& e) {
    setWhy(why, whyBytes, "%s: %s", entry, e.what());
  } catch (...) {
    setWhy(why, whyBytes, "%s: unknown exception", entry);
  }
  return false;
}

bool groupConnectStart(void* group, char* why, size_t whyBytes) noexcept {
  if (group == nullptr) {
    setWhy(why, whyBytes, "groupConnectStart: null group");
    return false;
  }
  auto* made = static_cast<NcclGroup*>(group);
  return onGroupDevice("groupConnectStart", made, why, whyBytes,
                       [&] { return made->connectStart(); });
}

int groupConnectPoll(void* group, char* why, size_t whyBytes) noexcept {
  if (group == nullptr) {
    setWhy(why, whyBytes, "groupConnectPoll: null group");
    return kGpuConnectFailed;
  }
  auto* made = static_cast<NcclGroup*>(group);
  GpuConnectState state = kGpuConnectFailed;
  onGroupDevice("groupConnectPoll", made, why, whyBytes, [&] {
    Status failure = Status::ok();
    state = made->connectPoll(&failure);
    return failure;  // set when state is kGpuConnectFailed
  });
  return state;
}

void groupDestroy(void* group, bool abort) noexcept {
  if (group == nullptr) return;
  try {
    auto* made = static_cast<NcclGroup*>(group);
    if (abort) made->markBroken();
    DeviceGuard guard;
    (void)guard.enter(made->device());  // on failure, destroy on whatever device is current
    delete made;
  } catch (...) {
  }
}

bool supports(DType dtype, RedOp op) noexcept {
  ncclDataType_t type;
  ncclRedOp_t nccl;
  return ncclTypeOf(dtype, &type) && ncclOpOf(op, &nccl);
}

bool fusedAllreduce(void* group, const GpuFusedCall* call, GpuCallRecord* record, char* why,
                    size_t whyBytes) noexcept {
  if (group == nullptr || call == nullptr || record == nullptr) {
    setWhy(why, whyBytes, "fusedAllreduce: null group, call or record");
    return false;
  }
  *record = GpuCallRecord{};
  auto* made = static_cast<NcclGroup*>(group);
  return onGroupDevice("fusedAllreduce", made, why, whyBytes, [&] {
    const Status status = made->fusedAllreduce(*call, record);
    if (!status.isOk()) made->abortAfterFailure();
    return status;
  });
}

bool allreduce(void* group, const GpuCall* call, GpuCallRecord* record, char* why,
               size_t whyBytes) noexcept {
  if (group == nullptr || call == nullptr) {
    setWhy(why, whyBytes, "allreduce: null group or call");
    return false;
  }
  GpuCallRecord ignored;
  GpuCallRecord& result = record != nullptr ? *record : ignored;
  result = GpuCallRecord{};
  auto* made = static_cast<NcclGroup*>(group);
  return onGroupDevice("allreduce", made, why, whyBytes, [&] {
    const Status status = made->allreduce(*call, &result);
    if (!status.isOk()) made->abortAfterFailure();
    return status;
  });
}

}  // namespace
}  // namespace gfshim::cuda

extern "C" __attribute__((visibility("default"))) const gfshim::GpuPluginApi*
gfshim_gpu_plugin_api() {
  static const gfshim::GpuPluginApi api = {
      gfshim::kGpuPluginAbiVersion,    gfshim::cuda::probe,
      gfshim::cuda::uniqueId,          gfshim::cuda::groupPrepare,
      gfshim::cuda::groupConnectStart, gfshim::cuda::groupConnectPoll,
      gfshim::cuda::groupDestroy,      gfshim::cuda::supports,
      gfshim::cuda::allreduce,         gfshim::cuda::fusedAllreduce,
  };
  return &api;
}
