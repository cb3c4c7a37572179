#include "mpi/engine.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/task.h"
#include "engine/execute.h"
#include "gpu/gpu_plugin.h"
#include "gpu/staged_allreduce.h"
#include "mpi/call_check.h"
#include "mpi/comm_registry.h"
#include "mpi/pmpi_wait.h"

namespace gfshim {
namespace {

// The NUMA node of `device` from hwloc's view of the node (matched by PCI bus id); -1 unknown.
int numaNodeOf(const CudaDriver& driver, const GpuCommState& gpu, int device) {
  std::string busId;
  if (!driver.pciBusId(device, &busId).isOk()) return -1;
  for (const PciDevice& candidate : gpu.nodeGpus) {
    if (candidate.pciBus == busId) return candidate.numaNode;
  }
  return -1;
}

// Where the bucket's buffers are, as one call's: a side is device memory when any operation's is.
BufferPlacements placementsOf(const Bucket& bucket) {
  BufferPlacements at = bucket.ops[0].at;
  for (size_t i = 1; i < bucket.opCount; ++i) {
    const BufferPlacements& op = bucket.ops[i].at;
    if (op.send.kind == MemKind::kDevice) at.send = op.send;
    if (op.recv.kind == MemKind::kDevice) at.recv = op.recv;
  }
  return at;
}

std::string phaseArguments(const Timeline* timeline, const Bucket& bucket) {
  if (timeline == nullptr) return std::string();
  return "\"bytes\": " + std::to_string(bucket.bytes()) +
         ", \"operations\": " + std::to_string(bucket.opCount);
}

// Whether a bucket planned for the MPI's own algorithm may run it here: not inside a task (a
// blocking collective would hold the application's thread until every peer joins; the progress
// mode is agreed, so every rank answers alike) and not beyond the MPI's int counts.
bool mpiAllreduceRunsHere(int64_t count) { return count <= INT_MAX && !Task::inTask(); }

std::string reducePhaseName(const Plan& plan, int64_t count) {
  const bool native = plan.route == Route::kPassthrough && mpiAllreduceRunsHere(count);
  std::string name = native                             ? "reduce native"
                     : plan.algo == Algo::kTorus2d      ? "reduce torus2d"
                     : plan.algo == Algo::kHierarchical ? "reduce hierarchical"
                     : plan.algo == Algo::kChain        ? "reduce chain"
                                                        : "reduce ring";
  if (plan.lossy.any()) name += std::string(" ") + lossyModeName(lossyModeIndex(plan.lossy));
  return name;
}

}  // namespace

int64_t Bucket::count() const {
  int64_t total = 0;
  for (size_t i = 0; i < opCount; ++i) total += ops[i].count;
  return total;
}

Status Engine::setUp(MPI_Comm comm, const Settings& settings, Stats* stats, Timeline* timeline) {
  comm_ = comm;
  settings_ = settings;
  stats_ = stats;
  timeline_ = timeline;
  GFSHIM_RETURN_IF_ERROR(describeOnComm(comm, settings, &facts_, &grid_, &gpu_.nodeGpus));
  transport_ = std::make_unique<PmpiTransport>(comm, facts_.rank, facts_.size);
  if (settings.cscKey == CscKey::kPosition && settings.cscDensity > 0) {
    steps_.emplace(static_cast<size_t>(settings.cscStepOperations));
  }
  return Status::ok();
}

std::vector<uintptr_t> Engine::residualNamesOf(const Bucket& bucket) {
  std::vector<uintptr_t> names(bucket.opCount);
  for (size_t i = 0; i < bucket.opCount; ++i) {
    names[i] = residualNameOf(bucket.ops[i].recv, bucket.ops[i].count, bucket.dtype, bucket.op);
  }
  return names;
}

uintptr_t Engine::residualNameOf(const void* recv, int64_t count, DType dtype, RedOp op) {
  if (!steps_ || dtype != DType::kFloat32 || op != RedOp::kSum) {
    return reinterpret_cast<uintptr_t>(recv);
  }
  StepPositions::Event event = StepPositions::Event::kNone;
  const std::optional<size_t> place = steps_->next(static_cast<size_t>(count), &event);
  if (event == StepPositions::Event::kLearned && facts_.rank == 0) {
    GFSHIM_INFO(kEngine,
                "GFSHIM_CSC_KEY=position: a step on this communicator is %zu float SUM "
                "operations (learned from their sizes); their residuals follow their places in "
                "it from now on",
                steps_->stepLength());
  } else if (event == StepPositions::Event::kBroken) {
    // Every rank sees the same sizes, so every rank drops its residuals here alike.
    if (lossy_) lossy_->residuals.dropComm(0);
    if (!stepsBrokenWarned_ && facts_.rank == 0) {
      GFSHIM_WARN(kEngine,
                  "GFSHIM_CSC_KEY=position: an operation of %lld elements broke the step's "
                  "pattern of sizes; the residuals on this communicator are dropped and the "
                  "step is %s again (said once)",
                  static_cast<long long>(count),
                  settings_.cscStepOperations > 0 ? "counted" : "learned");
    }
    stepsBrokenWarned_ = true;
  } else if (event == StepPositions::Event::kGaveUp && facts_.rank == 0) {
    GFSHIM_WARN(kEngine,
                "GFSHIM_CSC_KEY=position: no step found in the sizes of the first %lld float "
                "SUM operations on this communicator; they run dense (exact) from now on. "
                "GFSHIM_CSC_STEP_OPERATIONS gives the step",
                static_cast<long long>(steps_->learningLimit()));
  }
  return place ? stepPositionKey(*place) : 0;
}

Status Engine::agreeOnCudaDriver() {
  return agreeDriverOnSomeRank(comm_, &gpu_.driverOnSomeRank);
}

Plan Engine::plan(const Plan& callPlan, DType dtype, RedOp op, uint64_t bytes,
                  uint64_t largestOperationBytes) const {
  const Plan plan = planOnComm(callPlan, facts_);
  if (plan.route == Route::kPassthrough) return plan;
  return chooseAlgorithm(plan, facts_, settings_, dtype, op, bytes, largestOperationBytes);
}

GpuVote Engine::voteFor(const Bucket& bucket, const Plan& plan, const BufferPlacements& at) const {
  GpuVote vote;
  vote.device = at.anyDevice();
  vote.cannotStage = vote.device && !stagingAllowed();
  if (!vote.device) return vote;
  // Every operation on one GPU, NCCL-placeable; the plugin's fused call has no sparse mode, so a
  // CSC bucket of several operations is staged (its residuals per operation live in host memory),
  // and the plugin has no momentum correction or clipping, so a CSC call with them is staged too.
  const int device = bucket.ops[0].at.recv.device;
  const bool dgc = settings_.cscMomentum > 0 || settings_.cscClip > 0;
  bool placeable = !plan.lossy.sparse || (bucket.opCount == 1 && !dgc);
  for (size_t i = 0; i < bucket.opCount && placeable; ++i) {
    placeable = bucket.ops[i].at.ncclPlaceable() && bucket.ops[i].at.recv.device == device;
  }
  if (!placeable) return vote;
  std::string why;
  vote.ncclReady = ncclUsableOn(settings_, gpu_, device, bucket.dtype, bucket.op, &why);
  if (!why.empty()) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      GFSHIM_INFO(kEngine, "GPU buffers are staged through host memory: %s", why.c_str());
    }
  }
  return vote;
}

Status Engine::agree(const Bucket& bucket, const BucketOptions& options, const GpuVote& vote,
                     BucketOutcome* outcome, std::array<int32_t, 3>* minimum) {
  const std::array<int32_t, 3> mine = encodeGpuVote(vote);
  std::vector<int64_t> values(mine.begin(), mine.end());
  const bool voting = gpu_.driverOnSomeRank;
  if (options.checkArguments) {
    // A mismatch is reported on every rank before any transfer; the engine stays usable. The GPU
    // route vote rides in the same allreduce.
    GFSHIM_RETURN_IF_ERROR(agreeOnCall(comm_, transport_->waitState(),
                                       {bucket.count(), bucket.dtype, bucket.op},
                                       voting ? &values : nullptr));
  }
  outcome->pastArgumentCheck = true;
  if (!options.checkArguments && voting) {
    const TimelinePhase phase(timeline_, "gpu route agreement", phaseArguments(timeline_, bucket));
    const int rc = agreeMinimum(comm_, values.data(), static_cast<int>(values.size()));
    if (rc != MPI_SUCCESS) return mpiErrorStatus("agreement (GPU route)", rc);
  }
  std::copy(values.begin(), values.end(), minimum->begin());
  return Status::ok();
}

Status Engine::reduce(const Bucket& bucket, const Plan& plan, const BucketOptions& options,
                      BucketOutcome* outcome) {
  *outcome = BucketOutcome();
  const BufferPlacements at = placementsOf(bucket);
  const GpuVote vote = voteFor(bucket, plan, at);
  std::array<int32_t, 3> minimum{};
  GFSHIM_RETURN_IF_ERROR(agree(bucket, options, vote, outcome, &minimum));
  const std::vector<uintptr_t> residualNames =
      !options.residualNames.empty()    ? options.residualNames
      : steps_ || plan.lossy.any() ? residualNamesOf(bucket)
                                   : std::vector<uintptr_t>();
  GpuRoute route = at.anyDevice() ? GpuRoute::kStaged : GpuRoute::kHost;
  // Without a vote (no rank had the driver at setup) a device buffer that appeared since is
  // staged as one block: the host ranks' wire pattern.
  if (gpu_.driverOnSomeRank) route = decideGpuRoute(minimum);
  if (route == GpuRoute::kNccl) {
    if (options.beforeNccl) options.beforeNccl();
    const int device = bucket.ops[0].at.recv.device;
    bool ready = false;
    const TorusGrid* grid = grid_ ? &*grid_ : nullptr;
    GFSHIM_RETURN_IF_ERROR(ensureNcclGroup(comm_, facts_, grid, gpu_, device, settings_, &ready));
    // Agreed on every rank, like the setting: stage, or hand the bucket to the MPI.
    if (!ready) route = stagingAllowed() ? GpuRoute::kStaged : GpuRoute::kPassthrough;
  }
  if (route == GpuRoute::kNccl) {
    bool declined = false;
    const Status status = reduceOnGpu(bucket, plan, &declined);
    if (!declined) {
      if (status.isOk()) stats_->recordGpu(kGpuNccl, bucket.bytes());
      outcome->route = GpuRoute::kNccl;
      return status;
    }
    // Every rank's call was declined alike, before any transfer: every rank stages it, or hands
    // it to the MPI.
    route = stagingAllowed() ? GpuRoute::kStaged : GpuRoute::kPassthrough;
    if (route == GpuRoute::kStaged) {
      warnStagedAfterDecline(gpu_, bucket.opCount == 1 ? "NCCL allreduce" : "NCCL fused allreduce",
                             status.message());
    }
  }
  outcome->route = route;
  GFSHIM_TRACE(kEngine, "bucket of %zu operations, %lld elements, GPU route %s", bucket.opCount,
               static_cast<long long>(bucket.count()), gpuRouteName(route));
  if (route == GpuRoute::kPassthrough) {
    if (at.anyDevice() && !gpu_.warnedNoPath) {
      gpu_.warnedNoPath = true;
      GFSHIM_WARN(kEngine,
                  "a GPU buffer with neither NCCL nor staging (GFSHIM_GPU_STAGING=0) "
                  "goes to the MPI as it is: the MPI must be CUDA-aware");
    }
    return Status::ok();
  }
  return reduceOnHost(bucket, plan, route, residualNames);
}

Status Engine::reduceOnGpu(const Bucket& bucket, const Plan& plan, bool* declined) {
  *declined = false;
  const TimelinePhase phase(timeline_, "gpu route (NCCL)", phaseArguments(timeline_, bucket));
  const bool torus = plan.algo == Algo::kTorus2d && grid_.has_value();
  GpuCallRecord record;
  char why[256] = {};
  const GpuPluginApi* api = GpuPlugin::load(nullptr);
  bool ok = false;
  const char* what = "NCCL allreduce";
  if (bucket.opCount == 1) {
    GpuCall call;
    call.send = bucket.ops[0].send;
    call.recv = bucket.ops[0].recv;
    call.count = static_cast<size_t>(bucket.ops[0].count);
    call.dtype = bucket.dtype;
    call.op = bucket.op;
    call.torus = torus;
    call.codec = plan.lossy.codec;
    call.prescale = settings_.prescale;
    if (plan.lossy.sparse) {
      call.cscDensity = settings_.cscDensity;
      call.cscChunkElements = settings_.cscChunkElements;
      call.cscWarmupCalls = static_cast<int64_t>(settings_.cscWarmupCalls);
    }
    call.residualKey = reinterpret_cast<uintptr_t>(call.recv);
    ok = api->allreduce(gpu_.ncclGroup, &call, &record, why, sizeof(why));
  } else {
    what = "NCCL fused allreduce";
    std::vector<GpuFusedOp> ops;
    ops.reserve(bucket.opCount);
    for (size_t i = 0; i < bucket.opCount; ++i) {
      const BucketOperation& op = bucket.ops[i];
      ops.push_back({op.send, op.recv, static_cast<uint64_t>(op.count) * dtypeBytes(bucket.dtype)});
    }
    GpuFusedCall call;
    call.ops = ops.data();
    call.opCount = ops.size();
    call.dtype = bucket.dtype;
    call.op = bucket.op;
    call.torus = torus;
    call.codec = plan.lossy.codec;
    call.prescale = settings_.prescale;
    ok = api->fusedAllreduce(gpu_.ncclGroup, &call, &record, why, sizeof(why));
  }
  if (!ok) {
    if (record.declinedEverywhere) {
      *declined = true;
      return Status::error(StatusCode::kOutOfMemory, std::string(what) + ": " + why,
                           MPI_ERR_NO_MEM);
    }
    // The group refuses further calls: this rank votes against NCCL from now on.
    gpu_.ncclUnusable = std::string("an ") + what + " failed: " + why;
    return Status::error(StatusCode::kTransportError, std::string(what) + ": " + why,
                         MPI_ERR_OTHER);
  }
  if (plan.lossy.any()) {
    stats_->recordLossy(ncclLossyRecord(plan.lossy, bucket.bytes(),
                                        static_cast<size_t>(bucket.count()), facts_.size, record));
  }
  return Status::ok();
}

Status Engine::reduceOnHost(const Bucket& bucket, const Plan& plan, GpuRoute route,
                            const std::vector<uintptr_t>& residualNames) {
  const size_t elementBytes = dtypeBytes(bucket.dtype);
  const std::string arguments = phaseArguments(timeline_, bucket);
  if (bucket.opCount == 1) {
    const BucketOperation& op = bucket.ops[0];
    const size_t count = static_cast<size_t>(op.count);
    size_t blockElements = count;  // one block: the same wire pattern as a host call
    // Agreed, so every rank may cut an exact call into pipeline blocks; lossy calls stay whole
    // (CSC selects over the whole buffer).
    if (route == GpuRoute::kStaged && gpu_.driverOnSomeRank && !plan.lossy.any()) {
      blockElements = static_cast<size_t>(settings_.gpuStagingBytes / elementBytes);
    }
    const CudaDriver* driver = CudaDriver::inProcess();
    if (op.at.anyDevice()) {
      stats_->recordGpu(kGpuStagedEngine, bucket.bytes());
      const int device =
          op.at.recv.kind == MemKind::kDevice ? op.at.recv.device : op.at.send.device;
      if (device != gpu_.stagingDevice) {
        gpu_.stagingDevice = device;
        gpu_.stagingNumaNode = numaNodeOf(*driver, gpu_, device);
      }
    }
    const TimelinePhase phase(timeline_, reducePhaseName(plan, op.count), arguments);
    const StagedCall staged{op.send, op.recv, op.at, count, elementBytes};
    return runStagedAllreduce(
        driver, gpu_.staging, gpu_.stagingNumaNode, staged, blockElements,
        [&](const void* in, void* out, size_t /*first*/, size_t elements) {
          // Residuals follow the user's buffer, wherever it lives, or its place in the step.
          // (A lossy call is one block: `first` is 0.)
          std::vector<ResidualKey> keys;
          if (plan.lossy.any()) keys.push_back({residualNames[0], elements});
          return reduceBlock(bucket, plan, in, out, static_cast<int64_t>(elements), keys);
        });
  }
  std::byte* packed = packed_.reserve(bucket.bytes());
  if (packed == nullptr) return Status::error(StatusCode::kOutOfMemory, "no memory for a bucket");
  Status copyError = Status::ok();
  {
    const TimelinePhase phase(timeline_, "pack", arguments);
    pack(bucket, packed, &copyError);
  }
  std::vector<ResidualKey> keys;
  if (plan.lossy.any()) {
    for (size_t i = 0; i < bucket.opCount; ++i) {
      keys.push_back({residualNames[i], static_cast<size_t>(bucket.ops[i].count)});
    }
  }
  {
    const TimelinePhase phase(timeline_, reducePhaseName(plan, bucket.count()), arguments);
    GFSHIM_RETURN_IF_ERROR(reduceBlock(bucket, plan, packed, packed, bucket.count(), keys));
  }
  const TimelinePhase phase(timeline_, "unpack", arguments);
  const Status unpacked = unpack(bucket, packed);
  return copyError.isOk() ? unpacked : copyError;
}

Status Engine::reduceBlock(const Bucket& bucket, const Plan& plan, const void* in, void* out,
                           int64_t count, const std::vector<ResidualKey>& keys) {
  const TorusGrid* grid = grid_ ? &*grid_ : nullptr;
  if (plan.lossy.any()) {
    if (!lossy_) lossy_ = std::make_unique<LossyState>(settings_);
    const LossyTarget target{*transport_, workspace_, grid, logicalOrOn(comm_), equalOn(comm_)};
    LossyRecord record;
    GFSHIM_RETURN_IF_ERROR(runLossyAllreduce(
        plan, settings_, static_cast<size_t>(count), static_cast<const float*>(in),
        static_cast<float*>(out), keys, target, *lossy_, &record));
    stats_->recordLossy(record);
    return Status::ok();
  }
  Plan run = plan;
  if (plan.route == Route::kPassthrough) {
    // The cost model prefers the MPI's own algorithm (a fusion round's bucket; a blocking call
    // that it gives to the MPI never reaches the engine). Where it may not run here, the ring
    // reduces it.
    if (mpiAllreduceRunsHere(count)) {
      const int rc = PMPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(count),
                                    bucket.mpiDatatype, bucket.mpiOp, comm_);
      return rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Allreduce", rc);
    }
    run.route = Route::kEngine;
    run.algo = Algo::kRing;
    run.segmentBytes = settings_.segmentBytes;
  }
  CallInfo block;
  block.count = count;
  block.dtype = bucket.dtype;
  block.op = bucket.op;
  block.inPlace = in == out;
  return executePlan(run, block, *transport_, workspace_, in, out, grid);
}

void Engine::pack(const Bucket& bucket, std::byte* packed, Status* copyError) {
  const CudaDriver* driver = CudaDriver::inProcess();
  const size_t elementBytes = dtypeBytes(bucket.dtype);
  for (size_t i = 0; i < bucket.opCount; ++i) {
    const BucketOperation& op = bucket.ops[i];
    const size_t bytes = static_cast<size_t>(op.count) * elementBytes;
    Status copied = Status::ok();
    if (op.at.send.kind == MemKind::kHost) {
      std::memcpy(packed, op.send, bytes);
    } else {
      stats_->recordGpu(kGpuFused, bytes);
      copied = driver->copyToHost(op.at.send.context, packed, op.send, bytes);
    }
    // A failed device copy still takes part (with zeros): the peers reduce this bucket anyway.
    if (!copied.isOk()) {
      std::memset(packed, 0, bytes);
      if (copyError->isOk()) *copyError = copied;
    }
    packed += bytes;
  }
}

Status Engine::unpack(const Bucket& bucket, const std::byte* packed) {
  const CudaDriver* driver = CudaDriver::inProcess();
  const size_t elementBytes = dtypeBytes(bucket.dtype);
  Status copyError = Status::ok();
  for (size_t i = 0; i < bucket.opCount; ++i) {
    const BucketOperation& op = bucket.ops[i];
    const size_t bytes = static_cast<size_t>(op.count) * elementBytes;
    if (op.at.recv.kind == MemKind::kHost) {
      std::memcpy(op.recv, packed, bytes);
    } else {
      if (op.at.send.kind == MemKind::kHost) stats_->recordGpu(kGpuFused, bytes);
      const Status copied = driver->copyToDevice(op.at.recv.context, op.recv, packed, bytes);
      if (!copied.isOk() && copyError.isOk()) copyError = copied;
    }
    packed += bytes;
  }
  return copyError;
}

}  // namespace gfshim
