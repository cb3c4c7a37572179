// MPI_Allreduce / MPI_Iallreduce (and the _c variants): translate the MPI arguments into a
// CallInfo, ask the policy, and either run the engine or call the matching PMPI function.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "engine/corrected_buffers.h"
#include "engine/policy.h"
#include "gpu/cuda_driver.h"
#include "hooks/hook_api.h"
#include "hooks/mpi_handles.h"
#include "hooks/next_mpi.h"
#include "hooks/runtime.h"
#include "hooks/staged_passthrough.h"
#include "mpi/engine.h"

namespace gfshim::hooks {
namespace {

struct TypedArgs {
  const void* send;
  void* recv;
  int64_t count;
  MPI_Datatype dtype;
  MPI_Op op;
  MPI_Comm comm;
  MPI_Request* request;
  AllreduceVariant variant;
};

TypedArgs typed(const RawAllreduceArgs& raw) {
  return {raw.send,
          raw.recv,
          raw.count,
          fromRaw<MPI_Datatype>(raw.dtype),
          fromRaw<MPI_Op>(raw.op),
          fromRaw<MPI_Comm>(raw.comm),
          static_cast<MPI_Request*>(raw.request),
          raw.variant};
}

// Where a call goes that the shim does not run itself: to PMPI (the shim's own nested calls,
// never seen by another tool) or to the next definition of the same MPI_* function (the
// application's pass-through calls, which a PMPI tool preloaded after the shim must see).
enum class Target { kPmpi, kNext };

#ifdef GFSHIM_HAVE_BIGCOUNT
GFSHIM_NEXT_MPI(Allreduce_c);
GFSHIM_NEXT_MPI(Iallreduce_c);
#endif
GFSHIM_NEXT_MPI(Allreduce);
GFSHIM_NEXT_MPI(Iallreduce);

int callMpi(const TypedArgs& a, Target target) {
  const bool next = target == Target::kNext;
  switch (a.variant) {
    case AllreduceVariant::kBlocking: {
      const int count = static_cast<int>(a.count);
      return next ? nextAllreduce(a.send, a.recv, count, a.dtype, a.op, a.comm)
                  : PMPI_Allreduce(a.send, a.recv, count, a.dtype, a.op, a.comm);
    }
    case AllreduceVariant::kNonblocking: {
      const int count = static_cast<int>(a.count);
      return next ? nextIallreduce(a.send, a.recv, count, a.dtype, a.op, a.comm, a.request)
                  : PMPI_Iallreduce(a.send, a.recv, count, a.dtype, a.op, a.comm, a.request);
    }
#ifdef GFSHIM_HAVE_BIGCOUNT
    case AllreduceVariant::kBlockingBigCount:
      return next ? nextAllreduce_c(a.send, a.recv, a.count, a.dtype, a.op, a.comm)
                  : PMPI_Allreduce_c(a.send, a.recv, a.count, a.dtype, a.op, a.comm);
    case AllreduceVariant::kNonblockingBigCount:
      return next ? nextIallreduce_c(a.send, a.recv, a.count, a.dtype, a.op, a.comm, a.request)
                  : PMPI_Iallreduce_c(a.send, a.recv, a.count, a.dtype, a.op, a.comm, a.request);
#else
    default:
      break;
#endif
  }
  return MPI_ERR_INTERN;
}

// The application's call, passed through.
int callNext(const TypedArgs& a) { return callMpi(a, Target::kNext); }

// The same call on host copies of its buffers (a pass-through staged around the MPI call). A
// nonblocking one (staged only on a single-rank communicator, where no peer is waited for) runs
// blocking, so that the copy back follows its result; its request is then a zero-count
// MPI_Iallreduce on the same communicator, which completes at its first wait or test.
int callNextOnHost(const void* context, const void* send, void* recv) {
  TypedArgs host = *static_cast<const TypedArgs*>(context);
  host.send = send;
  host.recv = recv;
  if (host.variant == AllreduceVariant::kBlocking ||
      host.variant == AllreduceVariant::kBlockingBigCount) {
    return callNext(host);
  }
  TypedArgs blocking = host;
  blocking.variant = host.variant == AllreduceVariant::kNonblocking
                         ? AllreduceVariant::kBlocking
                         : AllreduceVariant::kBlockingBigCount;
  const int rc = callNext(blocking);
  if (rc != MPI_SUCCESS) return rc;
  static char nothing;
  TypedArgs completed = host;
  completed.send = MPI_IN_PLACE;
  completed.recv = &nothing;
  completed.count = 0;
  return callNext(completed);
}

CallInfo describeCall(const TypedArgs& a) {
  CallInfo call;
  call.count = a.count;
  call.dtype = engineDType(a.dtype);
  call.op = engineOp(a.op);
  call.inPlace = a.send == MPI_IN_PLACE;
  call.nullComm = a.comm == MPI_COMM_NULL;
  call.nonblocking = a.variant == AllreduceVariant::kNonblocking ||
                     a.variant == AllreduceVariant::kNonblockingBigCount;
  call.sendAddress = reinterpret_cast<uintptr_t>(a.send);
  call.recvAddress = reinterpret_cast<uintptr_t>(a.recv);
  return call;
}

// An error after the engine started: hand it to the application's error handler on its
// communicator, as the MPI would for its own failure. The code carries the shim's text
// ("libgfshim: allreduce failed: PMPI_Isend: ...") in the class of the MPI's original error
// (MPI_ERR_INTERN or MPI_ERR_NO_MEM for the shim's own failures).
int reportError(MPI_Comm comm, const Status& status) {
  int code = MPI_ERR_INTERN;
  if (status.code() == StatusCode::kTransportError && status.mpiError() != MPI_SUCCESS) {
    code = status.mpiError();
  } else if (status.code() == StatusCode::kOutOfMemory) {
    code = MPI_ERR_NO_MEM;
  }
  GFSHIM_WARN(kEngine, "allreduce failed: %s", status.message().c_str());
  code = readableErrorCode(code, "libgfshim: allreduce failed: " + status.message());
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

// Plans are agreed, so the communicator's rank 0 speaks for all of its ranks.
void logPlanOnce(CommState& state, const CallInfo& call, const Plan& plan) {
  if (state.facts().rank != 0 || !logEnabled(LogLevel::kInfo, LogSubsys::kPolicy)) return;
  if (!state.loggedShapes.insert({call.bytes(), *call.dtype}).second) return;
  std::string segment = plan.route == Route::kEngine
                            ? ", segment " + std::to_string(plan.segmentBytes) + " bytes"
                            : "";
  if (plan.algo == Algo::kTorus2d || plan.algo == Algo::kHierarchical) {
    segment += ", " + std::to_string(plan.torusPieces) + " pieces";
  }
  if (plan.algo == Algo::kTorus2d) {
    switch (plan.torusColumn) {
      case TorusColumn::kRing:
        segment += ", columns by ring";
        break;
      case TorusColumn::kHalvingDoubling:
        segment += ", columns by recursive halving and doubling";
        break;
      case TorusColumn::kRingThenHalving:
        segment +=
            ", columns split: a ring among the odd factor's nodes, then recursive halving "
            "and doubling";
        break;
    }
  }
  const std::string estimate = formatEstimate(plan.estimate);
  GFSHIM_INFO(kPolicy, "allreduce of %llu bytes (%lld x %s, %s) on %d ranks -> %s%s%s%s",
              static_cast<unsigned long long>(call.bytes()), static_cast<long long>(call.count),
              dtypeName(*call.dtype), redOpName(*call.op), state.facts().size,
              reasonText(plan.reason), segment.c_str(), estimate.empty() ? "" : "; predicted ",
              estimate.c_str());
}

// A pass-through the shim cannot stage (nonblocking on several ranks, intercommunicator) whose
// buffers are device memory: the MPI gets the device pointer, which only a CUDA-aware MPI
// handles. Said once, and counted.
void warnIfDevicePointerToMpi(Runtime& rt, const TypedArgs& a, const CallInfo& call) {
  const CudaDriver* driver = CudaDriver::inProcess();
  if (driver == nullptr || !call.dtype || call.count <= 0) return;
  if (!CudaDriver::placementsOf(driver, call.inPlace ? a.recv : a.send, a.recv).anyDevice()) return;
  rt.stats.recordGpu(kGpuToMpi, call.bytes());
  static std::atomic<bool> told{false};
  if (!told.exchange(true)) {
    GFSHIM_WARN(kEngine,
                "a GPU buffer in a call the shim passes through unstaged (%s): the MPI must be "
                "CUDA-aware",
                call.nonblocking ? "MPI_Iallreduce" : "intercommunicator");
  }
}

// Under momentum correction with address keys, a float SUM call the shim passes through whose
// receive buffer an engine keeps a velocity for: that reduction bypasses the velocity
// (engine/corrected_buffers.h). Said once. (The small-call lane never takes a corrected size.)
void warnIfCorrectedBufferToMpi(const Runtime& rt, const TypedArgs& a, const CallInfo& call,
                                Reason reason) {
  if (!velocitiesFollowBuffers(rt.settings) || call.dtype != DType::kFloat32 ||
      call.op != RedOp::kSum || call.count <= 0) {
    return;
  }
  if (!CorrectedBuffers::process().corrected(reinterpret_cast<uintptr_t>(a.recv),
                                             static_cast<size_t>(call.count))) {
    return;
  }
  static std::atomic<bool> told{false};
  if (told.exchange(true)) return;
  GFSHIM_WARN(kEngine,
              "GFSHIM_CSC_MOMENTUM: a buffer of %lld floats whose momentum the shim keeps went to "
              "the MPI (%s): that reduction bypasses its velocity, so the shim's update for it is "
              "not momentum SGD's. Reduce each gradient one way on one communicator (said once)",
              static_cast<long long>(call.count), reasonText(reason));
}

void recordPassthrough(Runtime& rt, Reason reason, int64_t count, uint64_t bytes) {
  rt.stats.record(reason, bytes, 0, 0);
  GFSHIM_TRACE(kPolicy, "allreduce count=%lld -> passthrough: %s", static_cast<long long>(count),
               reasonText(reason));
}

int passthrough(Runtime& rt, const TypedArgs& a, const CallInfo& call, Reason reason) {
  recordPassthrough(rt, reason, call.count, call.bytes());
  warnIfCorrectedBufferToMpi(rt, a, call, reason);
  if (mayStagePassthrough(call, reason)) {
    bool staged = false;
    Status copyError;
    const int rc = stagedPassthrough(rt, call, a.send, a.recv, MPI_IN_PLACE, callNextOnHost, &a,
                                     &staged, &copyError);
    if (!copyError.isOk()) return reportError(a.comm, copyError);
    if (staged) return rc;
  } else if (call.nonblocking || reason == Reason::kInterComm || reason == Reason::kSpansWorlds) {
    warnIfDevicePointerToMpi(rt, a, call);
  }
  return callNext(a);
}

// The start both engine paths share: the communicator's state and the plan on it. Returns true
// when the engine goes on with *state; otherwise *rc is what the hook returns. The attribute
// lookup is local and fails only for an invalid communicator, on every rank: the MPI reports
// that. After it, a failure is reported as an error, never a pass-through: the other ranks may
// already be on the engine path (invariant 3).
bool engineState(Runtime& rt, const TypedArgs& a, const CallInfo& call, Plan* plan,
                 CommState** state, int* rc) {
  const Status status = rt.registry.stateFor(a.comm, rt.paramsAgree, state);
  if (!status.isOk()) {
    *rc = passthrough(rt, a, call, Reason::kInvalidComm);
    return false;
  }
  *plan = planOnComm(*plan, (*state)->facts());
  if (plan->route == Route::kPassthrough) {
    *rc = passthrough(rt, a, call, plan->reason);
    return false;
  }
  if (!(*state)->failure.empty()) {
    *rc = reportError(a.comm, Status::error(StatusCode::kTransportError,
                                            "an earlier allreduce on this communicator failed (" +
                                                (*state)->failure + "); its state is unusable",
                                            MPI_ERR_OTHER));
    return false;
  }
  return true;
}

// The engine side of a call the policy accepted: a bucket of one (mpi/engine.h). Out of line,
// so the pass-through path of tiny calls keeps a small stack frame.
__attribute__((noinline)) int engineAllreduce(Runtime& rt, const TypedArgs& a, const CallInfo& call,
                                              Plan plan) {
  CommState* state = nullptr;
  int rc = MPI_SUCCESS;
  if (!engineState(rt, a, call, &plan, &state, &rc)) return rc;
  Status status = rt.registry.ensureSetUp(a.comm, rt.settings, &rt.stats, *state);
  if (status.isOk()) status = ensureFusionQueue(rt, *state);
  if (!status.isOk()) {
    state->failure = status.message();
    return reportError(a.comm, status);
  }
  FusionQueue::progressAll();  // a peer's fused calls may wait for this rank (no progress hook)
  plan = state->engine->plan(plan, *call.dtype, *call.op, call.bytes());
  logPlanOnce(*state, call, plan);
  if (plan.route == Route::kPassthrough) return passthrough(rt, a, call, plan.reason);

  GFSHIM_TRACE(kPolicy, "allreduce count=%lld -> %s", static_cast<long long>(a.count),
               reasonText(plan.reason));
  const auto start = std::chrono::steady_clock::now();
  const void* send = call.inPlace ? a.recv : a.send;
  const BucketOperation operation{send, a.recv, call.count,
                                  CudaDriver::placementsOf(CudaDriver::inProcess(), send, a.recv)};
  const Bucket bucket{&operation, 1, *call.dtype, *call.op, a.dtype, a.op};
  BucketOptions options;
  options.checkArguments = rt.settings.checkCalls;
  // This communicator's fused NCCL work first (see FusionQueue::waitForEnqueued).
  options.beforeNccl = [state] {
    if (state->fusion) state->fusion->waitForEnqueued();
  };
  BucketOutcome outcome;
  status = state->engine->reduce(bucket, plan, options, &outcome);
  if (!status.isOk()) {
    // A failed argument check moved nothing: the communicator stays usable.
    if (outcome.pastArgumentCheck) state->failure = status.message();
    return reportError(a.comm, status);
  }
  if (outcome.route == GpuRoute::kPassthrough) {
    rt.stats.record(Reason::kGpuNoPath, call.bytes(), 0, 0);
    rt.stats.recordGpu(kGpuToMpi, call.bytes());
    return callNext(a);
  }
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  rt.stats.record(plan.reason, call.bytes(), state->facts().size,
                  static_cast<uint64_t>(nanos.count()));
  return MPI_SUCCESS;
}

// An MPI_Iallreduce while fusion is on: queued for the communicator's fusion queue, which
// completes the generalized request returned to the application (mpi/fusion_queue.h). With an
// Open MPI progress thread, calls the engine cannot reduce (user op, derived datatype; `reason`
// says which) are queued too, and the thread hands them to PMPI_Allreduce in their place in the
// queue: so no MPI nonblocking collective runs beside the fusion thread (Open MPI 4.1's libnbc
// corrupted memory when it did). Elsewhere they go to the MPI's own MPI_Iallreduce, like calls
// below GFSHIM_FUSION_MIN_BYTES (policy.h).
__attribute__((noinline)) int queueIallreduce(Runtime& rt, const TypedArgs& a, const CallInfo& call,
                                              Plan plan, std::optional<Reason> reason) {
  CommState* state = nullptr;
  int rc = MPI_SUCCESS;
  if (!engineState(rt, a, call, &plan, &state, &rc)) return rc;
  // No collective here (Iallreduces on different communicators may start in a different order
  // on every rank): the fusion communicator and its queue were made when this communicator was
  // (or at its first blocking engine call), where the queue's setup may be collective.
  if (!state->fusion) return passthrough(rt, a, call, Reason::kFusionNotPrepared);
  // Fusion only where it pays, on the queue's agreed facts: the same answer on every rank.
  if (!reason && mayGoToNativeIallreduce(call, rt.settings) &&
      call.bytes() < state->fusion->aloneNativeBelowBytes()) {
    return passthrough(rt, a, call, Reason::kAloneNativePredicted);
  }
  PendingOp op;
  op.send = call.inPlace ? a.recv : a.send;
  op.recv = a.recv;
  op.count = call.count;
  op.native = reason.has_value();
  if (!op.native) {
    op.dtype = *call.dtype;
    op.op = *call.op;
  } else {
    rt.stats.record(*reason, 0, 0, 0);
  }
  op.mpiDatatype = a.dtype;
  op.mpiOp = a.op;
  if (!op.native) op.at = CudaDriver::placementsOf(CudaDriver::inProcess(), op.send, op.recv);
  GFSHIM_TRACE(kPolicy, "iallreduce count=%lld -> fusion queue%s", static_cast<long long>(a.count),
               op.native ? " (reduced by PMPI_Allreduce)" : "");
  const Status status = state->fusion->enqueue(op, a.request);
  if (!status.isOk()) return reportError(a.comm, status);
  // Progress in calls: the round starts now, so a call that finds nothing to fuse with waits for
  // no cycle; calls posted while it runs form the next bucket.
  if (rt.settings.progressInCalls) FusionQueue::progressAll();
  return MPI_SUCCESS;
}

int routeAllreduce(Runtime& rt, const TypedArgs& a, const CallInfo& call) {
  const Plan plan = planCall(call, rt.settings);
  if (plan.route == Route::kPassthrough) {
    const bool queueNative =
        call.nonblocking && rt.settings.fusionAvailable &&
        !rt.settings.nativeIallreduceBesideFusion && a.variant == AllreduceVariant::kNonblocking &&
        (plan.reason == Reason::kUserOp || plan.reason == Reason::kUnsupportedDatatype);
    if (!queueNative) return passthrough(rt, a, call, plan.reason);
    Plan queued = plan;
    queued.route = Route::kEngine;
    return queueIallreduce(rt, a, call, queued, plan.reason);
  }
  return call.nonblocking ? queueIallreduce(rt, a, call, plan, std::nullopt)
                          : engineAllreduce(rt, a, call, plan);
}

// The lane of small calls (policy.h, SmallCallRule). On 2 ranks of one node Open MPI's 8-byte
// MPI_Allreduce takes 0.3 us, so each 10 ns the hook spends there is 3 % (issue 17): the lane
// answers from what this thread remembers of the last datatype and op it saw in each variant
// (blocking, nonblocking, and their big-count forms), the policy's smallCallCountLimit for them,
// without building a CallInfo. The lane runs only once MPI_Init has agreed the settings behind
// it, which then stay fixed, so what it remembers never goes stale.
struct SmallCallMemo {
  MPI_Datatype dtype;
  MPI_Op op;
  int64_t countLimit;  // 0 (as zero-initialized): no call is small
  uint32_t elementBytes;
  Reason reason;
};
constexpr int kVariants = 4;
__thread SmallCallMemo tSmallCallMemos[kVariants] GFSHIM_STATIC_TLS;

SmallCallMemo& smallCallMemoOf(AllreduceVariant variant) {
  return tSmallCallMemos[static_cast<int>(variant) & (kVariants - 1)];
}

void rememberSmallCalls(const Runtime& rt, const TypedArgs& a, const CallInfo& call) {
  if (!call.dtype || !call.op) return;
  smallCallMemoOf(a.variant) = {
      a.dtype, a.op,
      smallCallCountLimit(smallCallRule(rt.settings), *call.dtype, *call.op, call.nonblocking),
      static_cast<uint32_t>(dtypeBytes(*call.dtype)),
      call.nonblocking ? Reason::kBelowFusionMin : Reason::kBelowMinBytes};
}

// Where the CUDA driver is loaded, passthrough() first checks for device buffers to stage, so
// the lane is only for processes without it.
bool smallByMemo(const TypedArgs& a, const SmallCallMemo& memo) {
  return a.count > 0 && a.count < memo.countLimit && a.dtype == memo.dtype && a.op == memo.op &&
         a.comm != MPI_COMM_NULL && CudaDriver::inProcess() == nullptr;
}

// Every call the lane does not answer: the policy decides (planCall and after).
__attribute__((noinline)) int allreduceBeyondLane(Runtime& rt, const TypedArgs& a) noexcept {
  const CallInfo call = describeCall(a);
  rememberSmallCalls(rt, a, call);
  try {
    return routeAllreduce(rt, a, call);
  } catch (const std::bad_alloc&) {
    return reportError(a.comm, Status::error(StatusCode::kOutOfMemory, "out of memory"));
  } catch (...) {
    return reportError(a.comm, Status::error(StatusCode::kInternal, "unexpected exception"));
  }
}

}  // namespace

int allreduceHook(const RawAllreduceArgs& raw) noexcept {
  const TypedArgs a = typed(raw);
  Runtime& rt = runtime();
  if (ReentryGuard::inside()) return callMpi(a, Target::kPmpi);
  if (!rt.active.load(std::memory_order_acquire)) return callNext(a);
  ReentryGuard guard;
  const SmallCallMemo& memo = smallCallMemoOf(a.variant);
  if (smallByMemo(a, memo)) {
    recordPassthrough(rt, memo.reason, a.count, static_cast<uint64_t>(a.count) * memo.elementBytes);
    return callNext(a);
  }
  return allreduceBeyondLane(rt, a);
}

}  // namespace gfshim::hooks
