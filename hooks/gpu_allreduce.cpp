#include "hooks/gpu_allreduce.h"

#include <mpi.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "cuda/cuda_driver.h"
#include "engine/gpu_plugin.h"

namespace gfshim::hooks {
namespace {

bool ncclReadyFor(const Runtime& rt, const CommState& state, const CallInfo& call,
                  const BufferPlacements& at) {
  if (!at.ncclPlaceable()) return false;
  std::string why;
  const bool usable =
      ncclUsableOn(rt.settings, state.gpu, at.recv.device, *call.dtype, *call.op, &why);
  if (!why.empty()) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      GFSHIM_INFO(kEngine, "GPU buffers are staged through host memory: %s", why.c_str());
    }
  }
  return usable;
}

// The NUMA node of `device` from hwloc's view of the node (matched by PCI bus id); -1 unknown.
int numaNodeOf(const CudaDriver& driver, const GpuCommState& gpu, int device) {
  std::string busId;
  if (!driver.pciBusId(device, &busId).isOk()) return -1;
  for (const PciDevice& candidate : gpu.nodeGpus) {
    if (candidate.pciBus == busId) return candidate.numaNode;
  }
  return -1;
}

// *declined: the call failed on every rank alike before any of it was sent (the group stays
// usable), so the caller may stage it instead.
Status runNccl(Runtime& rt, CommState& state, const CallInfo& call, const Plan& plan,
               const void* send, void* recv, bool* declined) {
  *declined = false;
  GpuCall gpuCall;
  gpuCall.send = send;
  gpuCall.recv = recv;
  gpuCall.count = static_cast<size_t>(call.count);
  gpuCall.dtype = *call.dtype;
  gpuCall.op = *call.op;
  gpuCall.torus = plan.algo == Algo::kTorus2d && state.torusGrid.has_value();
  gpuCall.codec = plan.lossy.codec;
  gpuCall.prescale = rt.settings.prescale;
  if (plan.lossy.sparse) {
    gpuCall.cscDensity = rt.settings.cscDensity;
    gpuCall.cscChunkElements = rt.settings.cscChunkElements;
    gpuCall.cscWarmupCalls = static_cast<int64_t>(rt.settings.cscWarmupCalls);
  }
  gpuCall.residualKey = reinterpret_cast<uintptr_t>(recv);
  GpuCallRecord record;
  char why[256] = {};
  const GpuPluginApi* api = GpuPlugin::load(nullptr);
  if (!api->allreduce(state.gpu.ncclGroup, &gpuCall, &record, why, sizeof(why))) {
    if (record.declinedEverywhere) {
      *declined = true;
      return Status::error(StatusCode::kOutOfMemory, std::string("NCCL allreduce: ") + why,
                           MPI_ERR_NO_MEM);
    }
    // The group refuses further calls: this rank votes against NCCL from now on.
    state.gpu.ncclUnusable = std::string("an NCCL allreduce failed: ") + why;
    return Status::error(StatusCode::kTransportError, std::string("NCCL allreduce: ") + why,
                         MPI_ERR_OTHER);
  }
  if (plan.lossy.any()) {
    rt.stats.recordLossy(
        ncclLossyRecord(plan.lossy, call.bytes(), gpuCall.count, state.facts.size, record));
  }
  return Status::ok();
}

}  // namespace

GpuBallot gpuBallotFor(const Runtime& rt, const CommState& state, const CallInfo& call,
                       const void* send, const void* recv) {
  GpuBallot ballot;
  ballot.at = CudaDriver::placementsOf(CudaDriver::inProcess(), send, recv);
  ballot.voting = state.gpu.driverOnSomeRank;
  if (ballot.voting) {
    GpuVote vote;
    vote.device = ballot.at.anyDevice();
    vote.ncclReady = vote.device && ncclReadyFor(rt, state, call, ballot.at);
    vote.cannotStage = vote.device && !rt.settings.gpuStaging;
    ballot.vote = encodeGpuVote(vote);
  }
  return ballot;
}

Status runPlacedAllreduce(Runtime& rt, CommState& state, const CallInfo& call, const Plan& plan,
                          const void* send, void* recv, const BlockReduce& hostReduce,
                          const GpuBallot& ballot, GpuRoute* route) {
  const CudaDriver* driver = CudaDriver::inProcess();
  const BufferPlacements& at = ballot.at;
  const size_t count = static_cast<size_t>(call.count);
  *route = at.anyDevice() ? GpuRoute::kStaged : GpuRoute::kHost;
  size_t blockElements = count;  // one block: the same wire pattern as a host call
  if (ballot.voting) {
    std::array<int32_t, 3> minimum = ballot.minimum;
    if (!ballot.agreed) {
      const int rc = PMPI_Allreduce(ballot.vote.data(), minimum.data(), 3, MPI_INT32_T, MPI_MIN,
                                    state.privateComm);
      if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (GPU route agreement)", rc);
    }
    *route = decideGpuRoute(minimum);
    if (*route == GpuRoute::kNccl) {
      // The fusion thread's NCCL work on this GPU first (see FusionQueue::waitForEnqueued).
      if (state.fusion) state.fusion->waitForEnqueued();
      bool ready = false;
      const TorusGrid* grid = state.torusGrid ? &*state.torusGrid : nullptr;
      GFSHIM_RETURN_IF_ERROR(ensureNcclGroup(state.privateComm, state.facts, grid, state.gpu,
                                             at.recv.device, rt.settings, &ready));
      // Agreed on every rank, like the setting: stage, or hand the call to the MPI.
      if (!ready) *route = rt.settings.gpuStaging ? GpuRoute::kStaged : GpuRoute::kPassthrough;
    }
    // Agreed, so every rank may cut an exact call into pipeline blocks; lossy calls stay whole
    // (CSC selects over the whole buffer).
    if (*route == GpuRoute::kStaged && !plan.lossy.any()) {
      blockElements = static_cast<size_t>(rt.settings.gpuStagingBytes / dtypeBytes(*call.dtype));
    }
  }
  GFSHIM_TRACE(kEngine, "allreduce count=%lld, GPU route %s", static_cast<long long>(call.count),
               gpuRouteName(*route));
  switch (*route) {
    case GpuRoute::kPassthrough:
      if (at.anyDevice() && !state.gpu.warnedNoPath) {
        state.gpu.warnedNoPath = true;
        GFSHIM_WARN(kEngine,
                    "a GPU buffer with neither NCCL nor staging (GFSHIM_GPU_STAGING=0) "
                    "goes to the MPI as it is: the MPI must be CUDA-aware");
      }
      return Status::ok();
    case GpuRoute::kNccl: {
      bool declined = false;
      Status status = runNccl(rt, state, call, plan, send, recv, &declined);
      if (!declined) {
        if (status.isOk()) rt.stats.recordGpu(kGpuNccl, call.bytes());
        return status;
      }
      // Every rank's call was declined alike: every rank stages it, or fails it.
      if (!rt.settings.gpuStaging) return status;
      warnStagedAfterDecline(state.gpu, "NCCL allreduce", status.message());
      *route = GpuRoute::kStaged;
      break;
    }
    case GpuRoute::kStaged:
    case GpuRoute::kHost:
      break;
  }
  if (at.anyDevice()) {
    rt.stats.recordGpu(kGpuStagedEngine, call.bytes());
    const int device = at.recv.kind == MemKind::kDevice ? at.recv.device : at.send.device;
    if (device != state.gpu.stagingDevice) {
      state.gpu.stagingDevice = device;
      state.gpu.stagingNumaNode = numaNodeOf(*driver, state.gpu, device);
    }
  }
  const StagedCall staged{send, recv, at, count, dtypeBytes(*call.dtype)};
  return runStagedAllreduce(driver, state.gpu.staging, state.gpu.stagingNumaNode, staged,
                            blockElements, hostReduce);
}

int stagedPassthrough(Runtime& rt, const CallInfo& call, const void* send, void* recv,
                      const void* inPlaceMarker, PmpiCall pmpi, const void* context, bool* handled,
                      Status* copyError) {
  *handled = false;
  *copyError = Status::ok();
  const CudaDriver* driver = CudaDriver::inProcess();
  const void* source = call.inPlace ? recv : send;
  const BufferPlacements at = CudaDriver::placementsOf(driver, source, recv);
  if (!at.anyDevice()) return MPI_SUCCESS;
  const size_t bytes = call.bytes();
  if (!rt.settings.gpuStaging) {
    rt.stats.recordGpu(kGpuToMpi, bytes);
    return MPI_SUCCESS;
  }
  *handled = true;
  thread_local std::vector<std::byte> sendCopy, recvCopy;
  const bool sendOnDevice = at.send.kind == MemKind::kDevice;
  const bool recvOnDevice = at.recv.kind == MemKind::kDevice;
  if (recvOnDevice) recvCopy.resize(bytes);
  void* hostRecv = recvOnDevice ? recvCopy.data() : recv;
  const void* hostSend = send;
  Status status = Status::ok();
  if (call.inPlace) {
    hostSend = inPlaceMarker;
    if (recvOnDevice) status = driver->copyToHost(at.recv.context, hostRecv, recv, bytes);
    if (!status.isOk()) std::memset(hostRecv, 0, bytes);
  } else if (sendOnDevice) {
    sendCopy.resize(bytes);
    hostSend = sendCopy.data();
    status = driver->copyToHost(at.send.context, sendCopy.data(), send, bytes);
    if (!status.isOk()) std::memset(sendCopy.data(), 0, bytes);
  }
  // The MPI call runs even after a failed copy (with zeros): the peers are making it too.
  const int rc = pmpi(context, hostSend, hostRecv);
  if (status.isOk() && rc == MPI_SUCCESS && recvOnDevice) {
    status = driver->copyToDevice(at.recv.context, recv, hostRecv, bytes);
  }
  if (!status.isOk()) {
    *copyError = Status::error(StatusCode::kTransportError,
                               "staging a GPU buffer around the MPI call: " + status.message(),
                               MPI_ERR_OTHER);
  }
  rt.stats.recordGpu(kGpuStagedMpi, bytes);
  return rc;
}

}  // namespace gfshim::hooks
