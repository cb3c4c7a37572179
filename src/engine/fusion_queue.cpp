#include "engine/fusion_queue.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "engine/call_check.h"
#include "engine/comm_registry.h"
#include "engine/execute.h"
#include "engine/fusion_buckets.h"
#include "engine/gpu_plugin.h"
#include "transport/pmpi_wait.h"

namespace gfshim {

struct GrequestResult {
  std::atomic<int> error{MPI_SUCCESS};
  std::atomic<int> owners{2};  // the request (until MPI's free function) and the progress thread
};

namespace {

struct CompletionSignal {
  std::atomic<int64_t> inFlight{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<int> applicationsWaiting{0};
  std::atomic<uint64_t> polls{0};
  std::atomic<int> gathering{0};  // progress threads in gatherBurst
  std::mutex mutex;
  std::condition_variable changed;
};

// Every queue alive, for FusionQueue::stopAll and progressAll.
struct LiveQueues {
  std::mutex mutex;
  std::vector<FusionQueue*> queues;
  std::atomic<int> inCalls{0};  // queues progressed in calls
  std::atomic<int> active{0};   // of those, the ones whose round loop has work (see progress())
};

// This thread is inside progressAll (which the MPI's progress hook may call again from within).
thread_local bool tProgressing = false;

LiveQueues& liveQueues() {
  static LiveQueues* const live = new LiveQueues();
  return *live;
}

CompletionSignal& completionSignal() {
  static CompletionSignal* const signal = new CompletionSignal();  // outlives every thread
  return *signal;
}

void release(GrequestResult* result) {
  if (result->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete result;
}

// The generalized request's callbacks. MPI calls query after completion, from the thread that
// completes the request in Wait/Test; free once, when the request is freed.
int queryResult(void* state, MPI_Status* status) {
  auto* result = static_cast<GrequestResult*>(state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  const int error = result->error.load(std::memory_order_acquire);
  status->MPI_ERROR = error;
  return error;
}

int freeResult(void* state) {
  release(static_cast<GrequestResult*>(state));
  return MPI_SUCCESS;
}

// A queued collective cannot be withdrawn on one rank alone.
int refuseCancel(void*, int) { return MPI_SUCCESS; }

}  // namespace

int64_t FusionCompletions::inFlight() {
  return completionSignal().inFlight.load(std::memory_order_acquire);
}

uint64_t FusionCompletions::generation() {
  return completionSignal().generation.load(std::memory_order_acquire);
}

void FusionCompletions::waitForNext(uint64_t seen, std::chrono::microseconds timeout) {
  CompletionSignal& signal = completionSignal();
  std::unique_lock<std::mutex> lock(signal.mutex);
  signal.changed.wait_for(
      lock, timeout, [&] { return signal.generation.load(std::memory_order_acquire) != seen; });
}

FusionCompletions::ApplicationWaiting::ApplicationWaiting() {
  CompletionSignal& signal = completionSignal();
  {
    std::lock_guard<std::mutex> lock(signal.mutex);
    signal.applicationsWaiting.fetch_add(1, std::memory_order_acq_rel);
  }
  signal.changed.notify_all();
}

FusionCompletions::ApplicationWaiting::~ApplicationWaiting() {
  completionSignal().applicationsWaiting.fetch_sub(1, std::memory_order_acq_rel);
}

void FusionCompletions::applicationPolled() {
  CompletionSignal& signal = completionSignal();
  if (signal.gathering.load(std::memory_order_acquire) == 0) return;
  {
    std::lock_guard<std::mutex> lock(signal.mutex);
    signal.polls.fetch_add(1, std::memory_order_acq_rel);
  }
  signal.changed.notify_all();
}

void FusionCompletions::gatherBurst(std::chrono::microseconds cycle) {
  CompletionSignal& signal = completionSignal();
  std::unique_lock<std::mutex> lock(signal.mutex);
  const uint64_t polls = signal.polls.load(std::memory_order_acquire);
  signal.gathering.fetch_add(1, std::memory_order_acq_rel);
  signal.changed.wait_for(lock, cycle, [&] {
    return signal.applicationsWaiting.load(std::memory_order_acquire) > 0 ||
           signal.polls.load(std::memory_order_acquire) != polls;
  });
  signal.gathering.fetch_sub(1, std::memory_order_acq_rel);
}

void FusionCompletions::queued() {
  completionSignal().inFlight.fetch_add(1, std::memory_order_acq_rel);
}

void FusionCompletions::completed(size_t count) {
  CompletionSignal& signal = completionSignal();
  {
    std::lock_guard<std::mutex> lock(signal.mutex);
    signal.generation.fetch_add(1, std::memory_order_acq_rel);
    signal.inFlight.fetch_sub(static_cast<int64_t>(count), std::memory_order_acq_rel);
  }
  signal.changed.notify_all();
}

Status FusionQueue::create(MPI_Comm comm, int rank, int size, const FusionSettings& settings,
                           Stats* stats, std::unique_ptr<FusionQueue>* queue) {
  std::unique_ptr<FusionQueue> created(new FusionQueue());
  created->comm_ = comm;
  created->facts_.rank = rank;
  created->facts_.size = size;
  created->settings_ = settings;
  created->settings_.settings.minBytes = 0;  // a bucket is reduced whatever its size
  created->stats_ = stats;
  FusionQueue* const raw = created.get();
  if (settings.settings.progressInCalls) {
    {
      const TimelinePhase phase(settings.timeline, "setup");
      created->setUpStatus_ = created->setUp();
    }
    if (!created->setUpStatus_.isOk()) {
      GFSHIM_WARN(kEngine, "fused allreduce unavailable on a communicator: %s",
                  created->setUpStatus_.message().c_str());
    }
    if (settings.timeline) created->tracer_.emplace(*settings.timeline);
    static std::atomic<long> lanes{TimelineLane::kFirstTaskLane};
    created->timelineLane_ = lanes.fetch_add(1, std::memory_order_relaxed);
    created->task_ = std::make_unique<Task>([raw] { raw->rounds_.run(*raw, raw->setUpStatus_); });
  } else {
    created->thread_ = std::thread([raw] { raw->run(); });
  }
  {
    LiveQueues& live = liveQueues();
    std::lock_guard<std::mutex> lock(live.mutex);
    live.queues.push_back(raw);
    if (raw->task_) live.inCalls.fetch_add(1, std::memory_order_acq_rel);
  }
  *queue = std::move(created);
  return Status::ok();
}

bool FusionQueue::anyInCalls() { return liveQueues().inCalls.load(std::memory_order_acquire) > 0; }

void FusionQueue::progress() {
  if (rounds_.idle()) return;
  std::unique_lock<std::mutex> lock(taskMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is in the task
  resumeTask();
  // Counted as active while the loop has work (progressAll's fast path). Checked again after the
  // flag is cleared: an operation queued in between must not be missed.
  LiveQueues& live = liveQueues();
  if (rounds_.idle() && active_.exchange(false, std::memory_order_acq_rel)) {
    live.active.fetch_sub(1, std::memory_order_acq_rel);
    if (!rounds_.idle() && !active_.exchange(true, std::memory_order_acq_rel)) {
      live.active.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

void FusionQueue::progressAll() {
  LiveQueues& live = liveQueues();
  if (live.active.load(std::memory_order_acquire) == 0) return;
  if (tProgressing || Task::inTask()) return;
  std::unique_lock<std::mutex> lock(live.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;  // a queue is being made or freed: the next call progresses
  tProgressing = true;
  try {
    for (FusionQueue* queue : live.queues) {
      if (queue->task_) queue->progress();
    }
  } catch (...) {
    GFSHIM_WARN(kEngine, "fused allreduce progress failed: unexpected exception");
  }
  tProgressing = false;
}

Status FusionQueue::setUp() {
  GFSHIM_RETURN_IF_ERROR(
      describeOnComm(comm_, settings_.settings, &facts_, &grid_, &gpu_.nodeGpus));
  GFSHIM_RETURN_IF_ERROR(agreeDriverOnSomeRank(comm_, &gpu_.driverOnSomeRank));
  transport_ = std::make_unique<PmpiTransport>(comm_, facts_.rank, facts_.size);
  return Status::ok();
}

void FusionQueue::stop() {
  rounds_.requestStop();
  if (thread_.joinable()) thread_.join();
  if (!task_) return;
  markActive();
  // The round loop returns once every rank's queue is empty; until then this rank serves rounds,
  // and the other queues' too (a peer may be finishing another communicator's calls first).
  while (!task_->finished()) {
    {
      std::lock_guard<std::mutex> lock(taskMutex_);
      resumeTask();
    }
    progressAll();
  }
}

void FusionQueue::resumeTask() {
  const TimelineLane lane(timelineLane_);
  PhaseTracer* const outer = threadPhaseTracer();
  if (tracer_) setThreadPhaseTracer(&*tracer_);  // the algorithms' phases, for the timeline
  const auto start = std::chrono::steady_clock::now();
  task_->resume();
  stats_->recordFusionProgress(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count()));
  setThreadPhaseTracer(outer);
}

void FusionQueue::markActive() {
  if (task_ && !active_.exchange(true, std::memory_order_acq_rel)) {
    liveQueues().active.fetch_add(1, std::memory_order_acq_rel);
  }
}

void FusionQueue::stopAll() {
  LiveQueues& live = liveQueues();
  std::lock_guard<std::mutex> lock(live.mutex);
  // Progressed in calls, every queue finishes at once: the ranks may finish their communicators
  // in any order, so this rank serves all of them until every loop has returned.
  for (FusionQueue* queue : live.queues) {
    queue->rounds_.requestStop();
    queue->markActive();
  }
  for (bool running = true; running;) {
    running = false;
    for (FusionQueue* queue : live.queues) {
      if (!queue->task_ || queue->task_->finished()) continue;
      std::lock_guard<std::mutex> taskLock(queue->taskMutex_);
      queue->resumeTask();
      running = running || !queue->task_->finished();
    }
  }
  for (FusionQueue* queue : live.queues) queue->stop();
}

FusionQueue::~FusionQueue() {
  {
    LiveQueues& live = liveQueues();
    std::lock_guard<std::mutex> lock(live.mutex);
    live.queues.erase(std::remove(live.queues.begin(), live.queues.end(), this), live.queues.end());
    if (task_) live.inCalls.fetch_sub(1, std::memory_order_acq_rel);
  }
  stop();
  if (active_.exchange(false, std::memory_order_acq_rel)) {
    liveQueues().active.fetch_sub(1, std::memory_order_acq_rel);
  }
}

Status FusionQueue::enqueue(PendingOp op, MPI_Request* request) {
  op.result = new GrequestResult();
  const int rc = PMPI_Grequest_start(queryResult, freeResult, refuseCancel, op.result, request);
  if (rc != MPI_SUCCESS) {
    delete op.result;
    return mpiErrorStatus("PMPI_Grequest_start", rc);
  }
  op.request = *request;
  op.queuedAt = std::chrono::steady_clock::now();
  static std::atomic<uint64_t> nextId{1};
  op.id = nextId.fetch_add(1, std::memory_order_relaxed);
  if (settings_.timeline) {
    settings_.timeline->queued(op.id, op.native ? op.count : static_cast<int64_t>(op.bytes()));
  }
  FusionCompletions::queued();
  {
    std::lock_guard<std::mutex> lock(countsMutex_);
    ++enqueuedCount_;
  }
  rounds_.push(op);
  markActive();
  return Status::ok();
}

void FusionQueue::waitForEnqueued() {
  const FusionCompletions::ApplicationWaiting waiting;  // a burst being gathered starts now
  std::unique_lock<std::mutex> lock(countsMutex_);
  const uint64_t target = enqueuedCount_;
  while (task_ && completedCount_ < target) {
    lock.unlock();
    progressAll();  // this queue's peers may wait for another queue of this rank
    progress();
    lock.lock();
  }
  completedMore_.wait(lock, [&] { return completedCount_ >= target; });
}

void FusionQueue::gatherBurst() {
  // In calls, a round starts at once: the application's thread is not held to gather a burst.
  if (task_ || settings_.settings.cycleMs <= 0) return;
  FusionCompletions::gatherBurst(
      std::chrono::microseconds(static_cast<int64_t>(settings_.settings.cycleMs * 1000)));
}

Status FusionQueue::agree(int64_t queued, int64_t* least, int64_t* most) {
  const TimelinePhase phase(settings_.timeline, "negotiate",
                            "\"queued\": " + std::to_string(queued));
  stats_->recordFusion(1, 0, 0);
  std::vector<int64_t> values = {queued};
  const Status status =
      agreeLeastAndMost(comm_, transport_->waitState(),
                        {"fusion negotiation round", 0, DType::kInt64, RedOp::kMin}, values);
  if (!status.isOk()) {
    GFSHIM_WARN(kEngine, "fusion round failed, fused allreduces on this communicator fail: %s",
                status.message().c_str());
    return status;
  }
  *least = values[0];
  *most = values[1];
  return Status::ok();
}

void FusionQueue::took(std::vector<PendingOp>& taken) {
  if (settings_.timeline == nullptr) return;
  for (const PendingOp& op : taken) settings_.timeline->dequeued(op.id);
}

Status FusionQueue::packOperation(const PendingOp& op, std::byte* packed) {
  if (op.at.send.kind == MemKind::kHost) {
    std::memcpy(packed, op.send, op.bytes());
    return Status::ok();
  }
  stats_->recordGpu(kGpuFused, op.bytes());
  return CudaDriver::inProcess()->copyToHost(op.at.send.context, packed, op.send, op.bytes());
}

Status FusionQueue::unpackOperation(const PendingOp& op, const std::byte* packed) {
  if (op.at.recv.kind == MemKind::kHost) {
    std::memcpy(op.recv, packed, op.bytes());
    return Status::ok();
  }
  if (op.at.send.kind == MemKind::kHost) stats_->recordGpu(kGpuFused, op.bytes());
  return CudaDriver::inProcess()->copyToDevice(op.at.recv.context, op.recv, packed, op.bytes());
}

Status FusionQueue::reduceOnGpu(const PendingOp* run, const FusionBucket& bucket, const Plan& plan,
                                bool* done) {
  *done = false;
  // Every operation NCCL-placeable, all on one device.
  const int device = run[bucket.ops.front()].at.recv.device;
  bool ready = std::all_of(bucket.ops.begin(), bucket.ops.end(), [&](size_t index) {
    return run[index].at.ncclPlaceable() && run[index].at.recv.device == device;
  });
  ready = ready && ncclUsableOn(settings_.settings, gpu_, device, bucket.dtype, bucket.op, nullptr);
  int64_t everywhere = ready ? 1 : 0;
  const int rc = agreeMinimum(comm_, &everywhere, 1);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("agreement (fused GPU route)", rc);
  if (everywhere == 0) return Status::ok();
  const TorusGrid* grid = grid_ ? &*grid_ : nullptr;
  bool groupReady = false;
  GFSHIM_RETURN_IF_ERROR(
      ensureNcclGroup(comm_, facts_, grid, gpu_, device, settings_.settings, &groupReady));
  if (!groupReady) return Status::ok();
  std::vector<GpuFusedOp> ops;
  ops.reserve(bucket.ops.size());
  for (size_t index : bucket.ops)
    ops.push_back({run[index].send, run[index].recv, run[index].bytes()});
  GpuFusedCall call;
  call.ops = ops.data();
  call.opCount = ops.size();
  call.dtype = bucket.dtype;
  call.op = bucket.op;
  call.torus = plan.algo == Algo::kTorus2d && grid != nullptr;
  call.codec = plan.lossy.codec;
  call.prescale = settings_.settings.prescale;
  GpuCallRecord record;
  char why[256] = {};
  if (!GpuPlugin::load(nullptr)->fusedAllreduce(gpu_.ncclGroup, &call, &record, why, sizeof(why))) {
    if (record.declinedEverywhere) {  // every rank stages this bucket instead
      warnStagedAfterDecline(gpu_, "NCCL fused allreduce", why);
      return Status::ok();
    }
    // The group refuses further calls: this rank votes against NCCL from now on.
    gpu_.ncclUnusable = std::string("an NCCL fused allreduce failed: ") + why;
    return Status::error(StatusCode::kTransportError, std::string("NCCL fused allreduce: ") + why,
                         MPI_ERR_OTHER);
  }
  if (plan.lossy.any()) {
    stats_->recordLossy(ncclLossyRecord(plan.lossy, bucket.bytes, static_cast<size_t>(bucket.count),
                                        facts_.size, record));
  }
  *done = true;
  return Status::ok();
}

Status FusionQueue::reduceBucket(const PendingOp* run, const FusionBucket& bucket) {
  CallInfo call;
  call.count = bucket.count;
  call.dtype = bucket.dtype;
  call.op = bucket.op;
  const PendingOp& first = run[bucket.ops.front()];
  // A lone host operation is reduced in the user's buffers; device operations always go through
  // the packed host buffer.
  const bool single = bucket.ops.size() == 1 && !first.at.anyDevice();
  std::byte* packed = nullptr;
  if (!single) {
    packed = packed_.reserve(bucket.bytes);
    if (packed == nullptr) return Status::error(StatusCode::kOutOfMemory, "no memory for a bucket");
  }
  call.inPlace = !single || first.send == first.recv;
  call.sendAddress = reinterpret_cast<uintptr_t>(single ? first.send : packed);
  call.recvAddress = reinterpret_cast<uintptr_t>(single ? first.recv : packed);
  Plan plan = planOnComm(planCall(call, settings_.settings), facts_);
  plan = chooseAlgorithm(plan, facts_, settings_.settings, bucket.dtype, bucket.op, bucket.bytes);

  const std::string size = settings_.timeline == nullptr
                               ? std::string()
                               : "\"bytes\": " + std::to_string(bucket.bytes) +
                                     ", \"operations\": " + std::to_string(bucket.ops.size());
  // CSC buckets are staged: their residuals per operation live in host memory.
  if (gpu_.driverOnSomeRank && plan.route == Route::kEngine && !plan.lossy.sparse) {
    const auto start = std::chrono::steady_clock::now();
    bool done = false;
    std::optional<TimelinePhase> phase;
    phase.emplace(settings_.timeline, "gpu route (agreement, NCCL)", size);
    GFSHIM_RETURN_IF_ERROR(reduceOnGpu(run, bucket, plan, &done));
    if (done) {
      const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      stats_->record(Reason::kFused, bucket.bytes, facts_.size, static_cast<uint64_t>(nanos));
      stats_->recordGpu(kGpuNccl, bucket.bytes);
      return Status::ok();
    }
  }
  size_t offset = 0;
  Status copyError = Status::ok();
  if (!single) {
    const TimelinePhase phase(settings_.timeline, "pack", size);
    for (size_t index : bucket.ops) {
      // A failed device copy still takes part (with zeros): the peers reduce this bucket anyway.
      const Status copied = packOperation(run[index], packed + offset);
      if (!copied.isOk()) {
        std::memset(packed + offset, 0, run[index].bytes());
        if (copyError.isOk()) copyError = copied;
      }
      offset += run[index].bytes();
    }
  }
  const void* send = single ? first.send : packed;
  void* recv = single ? first.recv : packed;
  const auto start = std::chrono::steady_clock::now();
  // Inside a task no blocking MPI collective runs (it would hold the application's thread until
  // every peer joins): there the engine's ring reduces what the cost model gives the MPI.
  const bool native =
      plan.route == Route::kPassthrough && call.count <= INT32_MAX && !Task::inTask();
  std::optional<TimelinePhase> reducePhase;
  std::string phase = native                        ? "reduce native"
                      : plan.algo == Algo::kTorus2d ? "reduce torus2d"
                      : plan.algo == Algo::kChain   ? "reduce chain"
                                                    : "reduce ring";
  if (plan.lossy.any()) phase += std::string(" ") + lossyModeName(lossyModeIndex(plan.lossy));
  reducePhase.emplace(settings_.timeline, phase, size);
  if (native) {
    // The cost model prefers the MPI's own algorithm for this bucket.
    const int rc =
        PMPI_Allreduce(call.inPlace ? MPI_IN_PLACE : send, recv, static_cast<int>(call.count),
                       first.mpiDatatype, first.mpiOp, comm_);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce", rc);
  } else {
    if (plan.route == Route::kPassthrough) {  // inside a task, or too large for an int count
      plan.route = Route::kEngine;
      plan.algo = Algo::kRing;
      plan.segmentBytes = settings_.settings.segmentBytes;
    }
    GFSHIM_RETURN_IF_ERROR(reduceEngineBucket(run, bucket, plan, call, send, recv));
  }
  const auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  stats_->record(Reason::kFused, bucket.bytes, facts_.size, static_cast<uint64_t>(nanos));
  reducePhase.reset();
  if (!single) {
    const TimelinePhase phase(settings_.timeline, "unpack", size);
    offset = 0;
    for (size_t index : bucket.ops) {
      const Status copied = unpackOperation(run[index], packed + offset);
      if (!copied.isOk() && copyError.isOk()) copyError = copied;
      offset += run[index].bytes();
    }
  }
  return copyError;
}

Status FusionQueue::reduceEngineBucket(const PendingOp* run, const FusionBucket& bucket,
                                       const Plan& plan, const CallInfo& call, const void* send,
                                       void* recv) {
  const TorusGrid* grid = grid_ ? &*grid_ : nullptr;
  if (!plan.lossy.any()) return executePlan(plan, call, *transport_, workspace_, send, recv, grid);
  if (!lossy_) lossy_ = std::make_unique<LossyState>(settings_.settings.cscMaxResidualBytes);
  std::vector<ResidualKey> keys;
  for (size_t index : bucket.ops) {
    keys.push_back(
        {reinterpret_cast<uintptr_t>(run[index].recv), static_cast<size_t>(run[index].count)});
  }
  const LossyTarget target{*transport_, workspace_, grid, logicalOrOn(comm_)};
  LossyRecord record;
  GFSHIM_RETURN_IF_ERROR(runLossyAllreduce(
      plan, settings_.settings, static_cast<size_t>(call.count), static_cast<const float*>(send),
      static_cast<float*>(recv), keys, target, *lossy_, &record));
  stats_->recordLossy(record);
  return Status::ok();
}

// Native operations keep their place; the engine's operations between two of them are packed
// into buckets.
Status FusionQueue::reduce(std::vector<PendingOp>& taken) {
  if (settings_.settings.checkCalls) {
    std::vector<CallShape> shapes;
    for (const PendingOp& op : taken) {
      // A native operation enters with its element count only (its datatype is the MPI's).
      shapes.push_back(op.native ? CallShape{op.count, DType::kByte, RedOp::kBitOr}
                                 : CallShape{op.count, op.dtype, op.op});
    }
    const Status agreed = agreeOnRound(comm_, transport_->waitState(), shapes);
    if (!agreed.isOk()) {
      GFSHIM_WARN(kEngine, "%s; later fused allreduces on this communicator fail",
                  agreed.message().c_str());
      return agreed;
    }
  }
  size_t start = 0;
  while (start < taken.size()) {
    if (taken[start].native) {
      reduceNative(taken[start]);
      ++start;
      continue;
    }
    size_t end = start;
    std::vector<FusibleOp> shapes;
    for (; end < taken.size() && !taken[end].native; ++end) {
      shapes.push_back({taken[end].count, taken[end].dtype, taken[end].op});
    }
    for (const FusionBucket& bucket :
         packBuckets(shapes, settings_.settings.fusionBytes, fusionAloneBytesOn(facts_))) {
      const Status status = reduceBucket(&taken[start], bucket);
      if (!status.isOk()) {
        GFSHIM_WARN(kEngine, "fused allreduce failed, later ones on this communicator fail: %s",
                    status.message().c_str());
        return status;
      }
    }
    start = end;
  }
  return Status::ok();
}

void FusionQueue::reduceNative(PendingOp& op) {
  const TimelinePhase phase(settings_.timeline, "reduce native (PMPI_Allreduce)");
  op.nativeError = PMPI_Allreduce(op.send == op.recv ? MPI_IN_PLACE : op.send, op.recv,
                                  static_cast<int>(op.count), op.mpiDatatype, op.mpiOp, comm_);
}

void FusionQueue::complete(std::vector<PendingOp>& taken, const Status& status) {
  const TimelinePhase phase(settings_.timeline, "complete",
                            "\"operations\": " + std::to_string(taken.size()));
  int error = MPI_SUCCESS;
  if (!status.isOk()) {
    error = readableErrorCode(status.mpiError() != MPI_SUCCESS ? status.mpiError() : MPI_ERR_INTERN,
                              "libgfshim: fused allreduce failed: " + status.message());
  }
  const auto now = std::chrono::steady_clock::now();
  uint64_t queuedNanos = 0;
  for (PendingOp& op : taken) {
    queuedNanos += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - op.queuedAt).count());
    op.result->error.store(op.nativeError != MPI_SUCCESS ? op.nativeError : error,
                           std::memory_order_release);
    PMPI_Grequest_complete(op.request);
    release(op.result);
  }
  FusionCompletions::completed(taken.size());
  stats_->recordFusion(0, taken.size(), queuedNanos);
  {
    std::lock_guard<std::mutex> lock(countsMutex_);
    completedCount_ += taken.size();
  }
  completedMore_.notify_all();
}

void FusionQueue::run() {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // the short sleeps between rounds stay short
  std::optional<TimelinePhaseTracer> tracer;
  if (settings_.timeline) {
    tracer.emplace(*settings_.timeline);
    setThreadPhaseTracer(&*tracer);
  }
  Status status;
  {
    const TimelinePhase phase(settings_.timeline, "setup");
    status = setUp();
  }
  if (!status.isOk()) {
    GFSHIM_WARN(kEngine, "fused allreduce unavailable on a communicator: %s",
                status.message().c_str());
  }
  rounds_.run(*this, status);
  setThreadPhaseTracer(nullptr);
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  stats_->recordFusionProgress(static_cast<uint64_t>(cpu.tv_sec) * 1000000000ull +
                               static_cast<uint64_t>(cpu.tv_nsec));
}

}  // namespace gfshim
