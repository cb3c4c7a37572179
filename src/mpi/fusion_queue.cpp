#include "mpi/fusion_queue.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "engine/fusion_buckets.h"
#include "mpi/call_check.h"
#include "mpi/pmpi_wait.h"

namespace gfshim {

struct GrequestResult {
  std::atomic<int> error{MPI_SUCCESS};
  std::atomic<int> owners{2};  // the request (until MPI's free function) and the progress thread
  MPI_Request request = MPI_REQUEST_NULL;  // in FusedRequests until MPI's free function
};

namespace {

// The fused operations' requests not yet freed (FusionQueue::allFused).
struct FusedRequests {
  std::mutex mutex;
  std::unordered_set<MPI_Request> requests;
};

FusedRequests& fusedRequests() {
  static FusedRequests* const fused = new FusedRequests();  // outlives every thread
  return *fused;
}

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

// A queue whose setup (at creation, or the CUDA-driver agreement on its thread) failed: its
// operations fail without collectives (FusionRounds::run).
void warnFusionUnavailable(const Status& status) {
  GFSHIM_WARN(kEngine, "fused allreduce unavailable on a communicator: %s",
              status.message().c_str());
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
  auto* result = static_cast<GrequestResult*>(state);
  {
    FusedRequests& fused = fusedRequests();
    std::lock_guard<std::mutex> lock(fused.mutex);
    fused.requests.erase(result->request);
  }
  release(result);
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
  CommFacts facts;
  facts.rank = rank;
  facts.size = size;
  created->engine_ = std::make_unique<Engine>(facts);
  created->settings_ = settings;
  created->settings_.settings.minBytes = 0;  // a bucket is reduced whatever its size
  created->stats_ = stats;
  FusionQueue* const raw = created.get();
  {
    const TimelinePhase phase(settings.timeline, "setup");
    created->setUpStatus_ =
        created->engine_->setUp(comm, created->settings_.settings, stats, settings.timeline);
    // Progress in calls agrees on the CUDA driver now; a thread does so when it starts, at the
    // first MPI_Iallreduce (run()), where the application may have loaded CUDA since.
    if (created->setUpStatus_.isOk() && settings.settings.progressInCalls) {
      created->setUpStatus_ = created->engine_->agreeOnCudaDriver();
    }
  }
  if (!created->setUpStatus_.isOk()) {
    warnFusionUnavailable(created->setUpStatus_);
  } else if (settings.settings.algo == AlgoChoice::kAuto) {
    created->aloneNativeBelowBytes_ = fusedAloneBeatsNativeBytesOn(created->engine_->facts());
  }
  if (settings.settings.progressInCalls) {
    if (settings.timeline) created->tracer_.emplace(*settings.timeline);
    created->timelineLane_ = TimelineLane::fresh();
    created->task_ = std::make_unique<Task>([raw] { raw->rounds_.run(*raw, raw->setUpStatus_); });
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

bool FusionQueue::allFused(int count, const MPI_Request* requests) {
  FusedRequests& fused = fusedRequests();
  std::lock_guard<std::mutex> lock(fused.mutex);
  for (int i = 0; i < count; ++i) {
    if (requests[i] != MPI_REQUEST_NULL && fused.requests.count(requests[i]) == 0) return false;
  }
  return count > 0;
}

bool FusionQueue::progress() {
  if (rounds_.idle()) return true;
  std::unique_lock<std::mutex> lock(taskMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is in the task
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
  return true;
}

bool FusionQueue::progressAll() {
  LiveQueues& live = liveQueues();
  if (live.active.load(std::memory_order_acquire) == 0) return true;
  if (tProgressing || Task::inTask()) return false;
  std::unique_lock<std::mutex> lock(live.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // a queue is being made or freed: the next call progresses
  tProgressing = true;
  bool everyQueue = true;
  try {
    for (FusionQueue* queue : live.queues) {
      if (queue->task_) everyQueue = queue->progress() && everyQueue;
    }
  } catch (...) {
    GFSHIM_WARN(kEngine, "fused allreduce progress failed: unexpected exception");
    everyQueue = false;
  }
  tProgressing = false;
  return everyQueue;
}

void FusionQueue::progressAllOrBlock() {
  const ParkedWaits::LeftToBlocking leftToBlocking;
  const uint64_t before = ParkedWaits::events();
  if (!progressAll() || ParkedWaits::events() != before) return;
  // Nothing advanced: every task waits for a transfer. Holding every task, so that no other thread
  // resumes one (and tests a request this thread waits on) meanwhile, and marked as progressing,
  // so that the MPI's progress hook inside PMPI_Waitany does not try.
  LiveQueues& live = liveQueues();
  std::unique_lock<std::mutex> lock(live.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  std::vector<std::unique_lock<std::mutex>> held;
  std::vector<FusionQueue*> queues;
  std::vector<ParkedWaits*> drivers;
  for (FusionQueue* queue : live.queues) {
    if (!queue->task_) continue;
    std::unique_lock<std::mutex> taskLock(queue->taskMutex_, std::try_to_lock);
    if (!taskLock.owns_lock()) return;
    held.push_back(std::move(taskLock));
    queues.push_back(queue);
    drivers.push_back(&queue->parkedWaits_);
  }
  tProgressing = true;
  const int completed = ParkedWaits::blockUntilOneCompletes(drivers);
  tProgressing = false;
  if (completed >= 0) queues[static_cast<size_t>(completed)]->stats_->recordFusionBlockedWait();
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
  const ParkedWaits::Driving driving(&parkedWaits_);
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
  op.result->request = *request;
  {
    FusedRequests& fused = fusedRequests();
    std::lock_guard<std::mutex> lock(fused.mutex);
    fused.requests.insert(*request);
  }
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
  // Thread mode: the thread starts with the first operation, so communicators that never see an
  // MPI_Iallreduce cost no thread. MPI orders a communicator's collectives: no two application
  // threads enqueue on one queue at once.
  if (!task_ && !thread_.joinable()) thread_ = std::thread([this] { run(); });
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
      agreeLeastAndMost(comm_, engine_->waitState(),
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

Status FusionQueue::reduceBucket(PendingOp* run, const FusionBucket& bucket,
                                 const std::vector<uintptr_t>& runResidualNames) {
  std::vector<BucketOperation> operations;
  operations.reserve(bucket.ops.size());
  uint64_t largestOperationBytes = 0;
  for (size_t index : bucket.ops) {
    operations.push_back({run[index].send, run[index].recv, run[index].count, run[index].at});
    largestOperationBytes = std::max(largestOperationBytes, run[index].bytes());
  }
  const PendingOp& first = run[bucket.ops.front()];
  const Bucket reduced{operations.data(), operations.size(), bucket.dtype,
                       bucket.op,         first.mpiDatatype, first.mpiOp};
  // The bucket as one in-place call (its operations passed the call-level checks one by one).
  CallInfo call;
  call.count = bucket.count;
  call.dtype = bucket.dtype;
  call.op = bucket.op;
  call.inPlace = true;
  call.recvAddress = reinterpret_cast<uintptr_t>(first.recv);
  const Plan plan = engine_->plan(planCall(call, settings_.settings), bucket.dtype, bucket.op,
                                  bucket.bytes, largestOperationBytes);
  const auto start = std::chrono::steady_clock::now();
  BucketOutcome outcome;
  BucketOptions options;
  if (!runResidualNames.empty()) {
    for (size_t index : bucket.ops) options.residualNames.push_back(runResidualNames[index]);
  }
  GFSHIM_RETURN_IF_ERROR(engine_->reduce(reduced, plan, options, &outcome));
  if (outcome.route == GpuRoute::kPassthrough) {
    // Device buffers neither NCCL nor staging may take (progress thread only: inside a task they
    // are staged): the MPI reduces each as it is, as a blocking call's would be.
    for (size_t index : bucket.ops) {
      reduceNative(run[index]);
      stats_->record(Reason::kGpuNoPath, run[index].bytes(), 0, 0);
      stats_->recordGpu(kGpuToMpi, run[index].bytes());
    }
    return Status::ok();
  }
  const auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  stats_->record(Reason::kFused, bucket.bytes, engine_->facts().size, static_cast<uint64_t>(nanos));
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
    const Status agreed = agreeOnRound(comm_, engine_->waitState(), shapes);
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
      const PendingOp& op = taken[end];
      const bool apart = keptApartInBuckets(op.dtype, op.op, op.bytes(), settings_.settings);
      shapes.push_back({op.count, op.dtype, op.op, static_cast<uint8_t>(apart ? 1 : 0)});
    }
    // Places in the step follow the queue's order, not the buckets' (kinds and operations
    // reduced alone reorder them).
    std::vector<uintptr_t> residualNames;
    if (engine_->namesResidualsByPlace()) {
      for (size_t i = start; i < end; ++i) {
        residualNames.push_back(
            engine_->residualNameOf(taken[i].recv, taken[i].count, taken[i].dtype, taken[i].op));
      }
    }
    for (const FusionBucket& bucket : packBuckets(shapes, settings_.settings.fusionBytes,
                                                  fusionAloneBytesOn(engine_->facts()))) {
      const Status status = reduceBucket(&taken[start], bucket, residualNames);
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
  const void* send = op.send == op.recv ? MPI_IN_PLACE : op.send;
#ifdef GFSHIM_HAVE_BIGCOUNT
  if (op.count > INT_MAX) {  // an MPI_Iallreduce_c's device buffers
    op.nativeError = PMPI_Allreduce_c(send, op.recv, op.count, op.mpiDatatype, op.mpiOp, comm_);
    return;
  }
#endif
  op.nativeError =
      PMPI_Allreduce(send, op.recv, static_cast<int>(op.count), op.mpiDatatype, op.mpiOp, comm_);
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
  Status status = setUpStatus_;
  if (status.isOk()) {
    status = engine_->agreeOnCudaDriver();
    if (!status.isOk()) warnFusionUnavailable(status);
  }
  rounds_.run(*this, status);
  setThreadPhaseTracer(nullptr);
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  stats_->recordFusionProgress(static_cast<uint64_t>(cpu.tv_sec) * 1000000000ull +
                               static_cast<uint64_t>(cpu.tv_nsec));
}

}  // namespace gfshim
