#include "mpi/nccl_setup.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "gpu/cuda_driver.h"
#include "gpu/gpu_plugin.h"
#include "mpi/pmpi_transport.h"
#include "transport/private_tags.h"

namespace gfshim {

GpuCommState::~GpuCommState() {
  if (ncclGroup == nullptr) return;
  if (const GpuPluginApi* api = GpuPlugin::load(nullptr)) api->groupDestroy(ncclGroup, false);
}

bool ncclUsableOn(const Settings& settings, const GpuCommState& gpu, int device, DType dtype,
                  RedOp op, std::string* why) {
  if (!settings.nccl || !gpu.ncclUnusable.empty()) return false;
  if (settings.reproducible && reproducibleModeCovers(dtype)) return false;
  if (gpu.ncclGroup != nullptr && gpu.ncclDevice != device) return false;
  return GpuPlugin::usableOn(device, why) && GpuPlugin::load(nullptr)->supports(dtype, op);
}

LossyRecord ncclLossyRecord(const LossyModes& modes, uint64_t bytesIn, size_t count, int commSize,
                            const GpuCallRecord& record) {
  LossyRecord lossy;
  lossy.modes = modes;
  lossy.bytesIn = bytesIn;
  lossy.wireBytes = record.wireBytes;
  lossy.commSize = commSize;
  lossy.redone = record.overflowRedo;
  if (record.sparse && record.chunks > 0) {
    lossy.sparseElements = count;
    lossy.sentElements = static_cast<uint64_t>(static_cast<double>(count) *
                                               static_cast<double>(record.selectedChunks) /
                                               static_cast<double>(record.chunks));
  }
  return lossy;
}

void warnStagedAfterDecline(GpuCommState& gpu, const char* what, const std::string& why) {
  if (gpu.warnedDeclined) return;
  gpu.warnedDeclined = true;
  GFSHIM_WARN(kEngine, "an %s could not run (%s): staged through host memory", what, why.c_str());
}

Status agreeDriverOnSomeRank(MPI_Comm comm, bool* anywhere) {
  int here = CudaDriver::inProcess() != nullptr ? 1 : 0, any = 0;
  const int rc = PMPI_Allreduce(&here, &any, 1, MPI_INT, MPI_MAX, comm);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (CUDA driver agreement)", rc);
  *anywhere = any != 0;
  return Status::ok();
}

namespace {

// What each rank contributes to the NCCL setup: the unique ids it generated (rank 0 the world's,
// a row's first rank the row's, a column's first rank the column's) and which GPU it uses.
struct NcclSetupRecord {
  int32_t idsOk = 1;
  int32_t device = -1;
  uint64_t gpuKey = 0;  // hash of (host name, PCI bus id): equal keys are one GPU
  uint8_t worldId[kNcclUniqueIdBytes] = {};
  uint8_t rowId[kNcclUniqueIdBytes] = {};
  uint8_t columnId[kNcclUniqueIdBytes] = {};
};

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

// How a rank's NCCL initialisation ended, as it tells every peer.
enum ConnectOutcome : int {
  kStillConnecting = 0,
  kConnected = 1,
  kFailedHere = 2,  // NCCL reported an error on this rank
  kGaveUp = 3,      // a peer reported a failure first
  kTimedOut = 4,    // not finished within GFSHIM_NCCL_TIMEOUT_SEC
};

// Collective over `comm`: drives the plugin's nonblocking NCCL initialisation of `group` on this
// rank while listening for the peers' outcomes. Each rank sends its outcome to every peer exactly
// once, as soon as it is known: connected, failed, timed out, or given up because a peer's
// outcome was not "connected" (the NCCL initialisation of a rank that gave up is aborted when the
// group is destroyed, so no rank waits inside NCCL for a peer that left). Every rank ends with
// all p outcomes, so result->everywhere (all connected) is the same on every rank.
struct ConnectResult {
  bool everywhere = false;
  bool failedHere = false;  // this rank's own initialisation failed or timed out
  std::string why;          // the first rank's failure or timeout, for the warning
};
Status connectEverywhere(MPI_Comm comm, const CommFacts& facts, const GpuPluginApi& api,
                         void* group, double timeoutSec, ConnectResult* result) {
  std::string* why = &result->why;
  const int size = facts.size, rank = facts.rank;
  std::vector<int> outcomes(static_cast<size_t>(size), kStillConnecting);
  std::vector<MPI_Request> receives(static_cast<size_t>(size), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const int rc = PMPI_Irecv(&outcomes[static_cast<size_t>(r)], 1, MPI_INT, r,
                              kNcclConnectOutcomeTag, comm, &receives[static_cast<size_t>(r)]);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Irecv (NCCL setup outcome)", rc);
  }
  int& mine = outcomes[static_cast<size_t>(rank)];
  char text[256] = {};
  if (!api.groupConnectStart(group, text, sizeof(text))) {
    mine = kFailedHere;
    *why = text;
  }
  const auto start = std::chrono::steady_clock::now();
  int outstanding = size - 1;
  bool announced = false;
  std::vector<int> completed(static_cast<size_t>(size));
  while (!announced || outstanding > 0) {
    bool peerFailed = false;
    if (outstanding > 0) {
      int done = 0;
      const int rc =
          PMPI_Testsome(size, receives.data(), &done, completed.data(), MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Testsome (NCCL setup outcome)", rc);
      if (done != MPI_UNDEFINED) outstanding -= done;
    }
    for (int r = 0; r < size; ++r) {
      const int outcome = outcomes[static_cast<size_t>(r)];
      // Only a completed receive's buffer is read: its request is null.
      if (r != rank && receives[static_cast<size_t>(r)] == MPI_REQUEST_NULL &&
          outcome != kConnected)
        peerFailed = true;
    }
    if (mine == kStillConnecting) {
      const int state = api.groupConnectPoll(group, text, sizeof(text));
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (state == kGpuConnectDone) {
        mine = kConnected;
      } else if (state != kGpuConnectPending) {
        mine = kFailedHere;
        *why = text;
      } else if (peerFailed) {
        mine = kGaveUp;
      } else if (timeoutSec > 0 && waited > timeoutSec) {
        mine = kTimedOut;
      }
    }
    if (mine != kStillConnecting && !announced) {
      announced = true;
      sends.resize(static_cast<size_t>(size - 1));
      size_t next = 0;
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        const int rc =
            PMPI_Isend(&mine, 1, MPI_INT, r, kNcclConnectOutcomeTag, comm, &sends[next++]);
        if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Isend (NCCL setup outcome)", rc);
      }
      continue;  // the peers' outcomes may be complete already
    }
    // NCCL initialises on its own threads; a poll every 100 us costs nothing next to it.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const int rc = PMPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Waitall (NCCL setup outcome)", rc);
  result->everywhere = std::all_of(outcomes.begin(), outcomes.end(),
                                   [](int outcome) { return outcome == kConnected; });
  result->failedHere = mine == kFailedHere || mine == kTimedOut;
  // A rank gives up only after some outcome other than "connected", so the first failure or
  // timeout names the cause.
  for (int r = 0; r < size; ++r) {
    const int outcome = outcomes[static_cast<size_t>(r)];
    if (outcome != kFailedHere && outcome != kTimedOut) continue;
    const std::string where =
        r == rank ? "here (rank " + std::to_string(r) + ")" : "on rank " + std::to_string(r);
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", timeoutSec);
    *why = outcome == kTimedOut
               ? "NCCL initialisation did not finish within " + std::string(limit) +
                     " s (GFSHIM_NCCL_TIMEOUT_SEC) " + where
               : "NCCL initialisation failed " + where + (r == rank ? ": " + *why : std::string());
    break;
  }
  return Status::ok();
}

}  // namespace

Status ensureNcclGroup(MPI_Comm comm, const CommFacts& facts, const TorusGrid* grid,
                       GpuCommState& gpu, int device, const Settings& settings, bool* ready) {
  *ready = false;
  if (!gpu.ncclUnusable.empty()) return Status::ok();
  if (gpu.ncclGroup != nullptr) {
    *ready = true;  // every rank voted ncclReady, which requires its group on this device
    return Status::ok();
  }
  const GpuPluginApi* api = GpuPlugin::load(nullptr);
  const CudaDriver* driver = CudaDriver::inProcess();
  NcclSetupRecord mine;
  mine.device = device;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string busId;
  if (driver != nullptr && driver->pciBusId(device, &busId).isOk()) {
    mine.gpuKey = fnv1a(std::string(host) + "|" + busId);
  } else {
    mine.gpuKey = fnv1a(std::string(host) + "|device " + std::to_string(device));
  }
  char text[256] = {};
  const auto generate = [&](bool leader, uint8_t* id) {
    if (leader && (api == nullptr || !api->uniqueId(id, text, sizeof(text)))) mine.idsOk = 0;
  };
  if (api == nullptr) mine.idsOk = 0;
  generate(facts.rank == 0, mine.worldId);
  generate(grid != nullptr && grid->rowIndex == 0, mine.rowId);
  generate(grid != nullptr && grid->columnIndex == 0, mine.columnId);
  std::vector<NcclSetupRecord> all(static_cast<size_t>(facts.size));
  int rc = PMPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allgather (NCCL unique ids)", rc);
  // Decided from the gathered records alone, so every rank decides the same.
  for (size_t r = 0; r < all.size() && gpu.ncclUnusable.empty(); ++r) {
    if (!all[r].idsOk) gpu.ncclUnusable = "no NCCL unique id from rank " + std::to_string(r);
    for (size_t s = r + 1; s < all.size() && gpu.ncclUnusable.empty(); ++s) {
      if (all[r].gpuKey == all[s].gpuKey) {
        gpu.ncclUnusable = "ranks " + std::to_string(r) + " and " + std::to_string(s) +
                           " share a GPU (NCCL needs one GPU per rank)";
      }
    }
  }
  bool failedHere = false;  // this rank's own NCCL setup failed: it warns too
  if (gpu.ncclUnusable.empty()) {
    GpuGroupSpec spec;
    spec.device = device;
    spec.worldSize = facts.size;
    spec.worldRank = facts.rank;
    std::memcpy(spec.worldId, all[0].worldId, kNcclUniqueIdBytes);
    if (grid != nullptr) {
      spec.rowSize = static_cast<int>(grid->row.size());
      spec.rowRank = grid->rowIndex;
      std::memcpy(spec.rowId, all[static_cast<size_t>(grid->row[0])].rowId, kNcclUniqueIdBytes);
      spec.colSize = static_cast<int>(grid->column.size());
      spec.colRank = grid->columnIndex;
      std::memcpy(spec.colId, all[static_cast<size_t>(grid->column[0])].columnId,
                  kNcclUniqueIdBytes);
    }
    spec.cscMaxResidualBytes = settings.cscMaxResidualBytes;
    spec.timeoutSec = settings.ncclTimeoutSec;
    // Fallback for all ranks together (invariant 3): nothing of the call was sent yet. Local
    // preparation first and agreed, so that no rank enters NCCL's collective initialisation
    // while a peer has already given up; then the initialisation, whose outcomes the ranks
    // exchange while it runs (connectEverywhere).
    const bool prepared = api->groupPrepare(&spec, &gpu.ncclGroup, text, sizeof(text));
    int preparedHere = prepared ? 1 : 0, preparedEverywhere = 0;
    rc = PMPI_Allreduce(&preparedHere, &preparedEverywhere, 1, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (NCCL setup agreement)", rc);
    ConnectResult connected;
    if (!prepared) {
      connected.failedHere = true;
      connected.why = std::string("NCCL preparation failed here: ") + text;
    } else if (!preparedEverywhere) {
      connected.why = "NCCL preparation failed on another rank";
    } else {
      GFSHIM_RETURN_IF_ERROR(
          connectEverywhere(comm, facts, *api, gpu.ncclGroup, settings.ncclTimeoutSec, &connected));
    }
    if (!connected.everywhere) {
      if (gpu.ncclGroup != nullptr) api->groupDestroy(gpu.ncclGroup, true);
      gpu.ncclGroup = nullptr;
      gpu.ncclUnusable = connected.why;
      failedHere = connected.failedHere;
    }
  }
  if (!gpu.ncclUnusable.empty()) {
    if (facts.rank == 0 || failedHere)
      GFSHIM_WARN(kEngine,
                  "NCCL not used on this communicator of %d ranks: %s; its GPU buffers are "
                  "staged through host memory",
                  facts.size, gpu.ncclUnusable.c_str());
    return Status::ok();
  }
  gpu.ncclDevice = device;
  *ready = true;
  GFSHIM_INFO(kEngine, "NCCL communicators made on GPU %d for %d ranks%s", device, facts.size,
              grid != nullptr ? " (world, torus row and column)" : "");
  return Status::ok();
}

}  // namespace gfshim
