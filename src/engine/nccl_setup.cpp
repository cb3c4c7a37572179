#include "engine/nccl_setup.h"

#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "cuda/cuda_driver.h"
#include "engine/gpu_plugin.h"
#include "transport/pmpi_transport.h"

namespace gfshim {

GpuCommState::~GpuCommState() {
  if (ncclGroup == nullptr) return;
  if (const GpuPluginApi* api = GpuPlugin::load(nullptr)) api->groupDestroy(ncclGroup);
}

bool ncclUsableOn(const Settings& settings, const GpuCommState& gpu, int device, DType dtype,
                  RedOp op, std::string* why) {
  if (!settings.nccl || !gpu.ncclUnusable.empty()) return false;
  if (settings.reproducible && reproducibleModeCovers(dtype)) return false;
  if (gpu.ncclGroup != nullptr && gpu.ncclDevice != device) return false;
  return GpuPlugin::usableOn(device, why) && GpuPlugin::load(nullptr)->supports(dtype, op);
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

}  // namespace

Status ensureNcclGroup(MPI_Comm comm, const CommFacts& facts, const TorusGrid* grid,
                       GpuCommState& gpu, int device, uint64_t residualCapBytes, bool* ready) {
  *ready = false;
  if (!gpu.ncclUnusable.empty()) return Status::ok();
  if (gpu.ncclGroup != nullptr) {
    *ready = true;  // every rank voted ncclReady, which requires its group on this device
    return Status::ok();
  }
  std::string why;
  const GpuPluginApi* api = GpuPlugin::load(&why);
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
  bool created = false;
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
    spec.cscMaxResidualBytes = residualCapBytes;
    // Fallback for all ranks together (invariant 3): nothing of the call was sent yet. Local
    // preparation first and agreed, so that no rank enters NCCL's collective initialisation
    // while a peer has already given up; then the initialisation, agreed again.
    const auto agreed = [&](bool here, bool* everywhere) {
      int mine = here ? 1 : 0, all = 0;
      const int rc = PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
      *everywhere = all != 0;
      return rc;
    };
    created = api->groupPrepare(&spec, &gpu.ncclGroup, text, sizeof(text));
    if (!created) why = text;
    bool preparedEverywhere = false;
    rc = agreed(created, &preparedEverywhere);
    if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (NCCL setup agreement)", rc);
    bool connectedEverywhere = false;
    if (preparedEverywhere) {
      created = api->groupConnect(gpu.ncclGroup, text, sizeof(text));
      if (!created) why = text;
      rc = agreed(created, &connectedEverywhere);
      if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (NCCL setup agreement)", rc);
    }
    if (!connectedEverywhere) {
      if (gpu.ncclGroup != nullptr) api->groupDestroy(gpu.ncclGroup);
      gpu.ncclGroup = nullptr;
      gpu.ncclUnusable =
          created ? "NCCL setup failed on another rank" : "NCCL setup failed: " + why;
    }
  }
  if (!gpu.ncclUnusable.empty()) {
    if (facts.rank == 0 || (!created && !why.empty()))
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
