#include "engine/comm_registry.h"

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "cuda/cuda_driver.h"
#include "engine/gpu_plugin.h"
#include "topo/detect.h"

namespace gfshim {
namespace {

int deleteCommState(MPI_Comm, int, void* attribute, void*) {
  delete static_cast<CommState*>(attribute);
  return MPI_SUCCESS;
}

// True when some rank of `comm` is not in this process's MPI_COMM_WORLD (MPI_Comm_spawn,
// MPI_Comm_connect). The ranks of such a communicator agreed their parameters in different
// worlds, so the shim leaves it alone. Every member sees the same answer.
bool spansWorlds(MPI_Comm comm, int size) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  PMPI_Comm_group(comm, &group);
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<size_t>(size)), inWorld(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  PMPI_Group_translate_ranks(group, size, ranks.data(), world, inWorld.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world);
  for (int rank : inWorld) {
    if (rank == MPI_UNDEFINED) return true;
  }
  return false;
}

}  // namespace

GpuCommState::~GpuCommState() {
  if (ncclGroup == nullptr) return;
  if (const GpuPluginApi* api = GpuPlugin::load(nullptr)) api->groupDestroy(ncclGroup);
}

CommState::~CommState() {
  fusion.reset();  // completes what is still queued
  transport.reset();
  if (fusionComm != MPI_COMM_NULL) PMPI_Comm_free(&fusionComm);
  if (privateComm != MPI_COMM_NULL) PMPI_Comm_free(&privateComm);
}

Status CommRegistry::start() {
  const int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteCommState, &keyval_, nullptr);
  return rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Comm_create_keyval", rc);
}

Status CommRegistry::stateFor(MPI_Comm comm, bool paramsAgree, CommState** state) {
  void* attribute = nullptr;
  int found = 0;
  int rc = PMPI_Comm_get_attr(comm, keyval_, &attribute, &found);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Comm_get_attr", rc);
  if (found) {
    *state = static_cast<CommState*>(attribute);
    return Status::ok();
  }
  auto created = std::make_unique<CommState>();
  CommFacts& facts = created->facts;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  facts.interComm = inter != 0;
  PMPI_Comm_size(comm, &facts.size);
  PMPI_Comm_rank(comm, &facts.rank);
  facts.spansWorlds = !facts.interComm && spansWorlds(comm, facts.size);
  facts.paramsAgree = paramsAgree;
  rc = PMPI_Comm_set_attr(comm, keyval_, created.get());
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Comm_set_attr", rc);
  *state = created.release();
  return Status::ok();
}

// The private communicator is made with MPI_Comm_split (one color, same order) rather than
// MPI_Comm_dup: a dup would run the application's attribute copy callbacks (and later their
// delete callbacks) on a communicator the application never sees.
Status createPrivateComm(MPI_Comm comm, int rank, MPI_Comm* privateComm) {
  int rc = PMPI_Comm_split(comm, 0, rank, privateComm);
  if (rc != MPI_SUCCESS) {
    *privateComm = MPI_COMM_NULL;
    return mpiErrorStatus("PMPI_Comm_split", rc);
  }
  rc = PMPI_Comm_set_errhandler(*privateComm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    PMPI_Comm_free(privateComm);
    return mpiErrorStatus("PMPI_Comm_set_errhandler", rc);
  }
  return Status::ok();
}

Status describeOnComm(MPI_Comm comm, const Settings& settings, CommFacts* facts,
                      std::optional<TorusGrid>* torusGrid, std::vector<PciDevice>* nodeGpus) {
  CommTopology detected;
  GFSHIM_RETURN_IF_ERROR(detectTopology(comm, settings, &detected));
  const Topology& topology = detected.topology;
  if (nodeGpus != nullptr) *nodeGpus = topology.hardware.gpus;
  facts->nodes = topology.nodes;
  facts->ranksPerNode = topology.ranksPerNode;
  facts->intraLink = topology.intraLink;
  facts->interLink = topology.interLink;
  std::string why;
  const std::optional<TorusGrid> nodeGrid =
      torusGridFromNodes(facts->rank, detected.nodeOfRank, &why);
  *torusGrid = settings.torusX > 0
                   ? torusGridFromDims(facts->rank, facts->size, {settings.torusX, settings.torusY})
                   : nodeGrid;
  GFSHIM_INFO(kEngine, "set up a communicator of %d ranks: %s%s%s", facts->size,
              describeTopology(topology).c_str(),
              nodeGrid ? "" : "; no node grid: ", nodeGrid ? "" : why.c_str());
  if (!detected.hardwareUniform && facts->rank == 0) {
    GFSHIM_INFO(kEngine, "nodes describe different hardware; rank 0's is shown");
  }
  return Status::ok();
}

Status CommRegistry::prepareFusion(MPI_Comm comm, CommState& state) {
  if (state.fusionComm != MPI_COMM_NULL) return Status::ok();
  return createPrivateComm(comm, state.facts.rank, &state.fusionComm);
}

Status CommRegistry::ensureSetUp(MPI_Comm comm, const Settings& settings, CommState& state) {
  if (state.transport) return Status::ok();
  if (state.privateComm == MPI_COMM_NULL) {
    GFSHIM_RETURN_IF_ERROR(createPrivateComm(comm, state.facts.rank, &state.privateComm));
  }
  if (settings.fusionAvailable) GFSHIM_RETURN_IF_ERROR(prepareFusion(comm, state));
  GFSHIM_RETURN_IF_ERROR(describeOnComm(state.privateComm, settings, &state.facts, &state.torusGrid,
                                        &state.gpu.nodeGpus));
  // Whether any rank can hold device memory: then every engine call agrees on its GPU route.
  int driverHere = CudaDriver::inProcess() != nullptr ? 1 : 0, driverAnywhere = 0;
  const int rc =
      PMPI_Allreduce(&driverHere, &driverAnywhere, 1, MPI_INT, MPI_MAX, state.privateComm);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce (CUDA driver agreement)", rc);
  state.gpu.driverOnSomeRank = driverAnywhere != 0;
  state.transport =
      std::make_unique<PmpiTransport>(state.privateComm, state.facts.rank, state.facts.size);
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

Status CommRegistry::ensureNcclGroup(CommState& state, int device, uint64_t residualCapBytes,
                                     bool* ready) {
  *ready = false;
  GpuCommState& gpu = state.gpu;
  if (!gpu.ncclUnusable.empty()) return Status::ok();
  if (gpu.ncclGroup != nullptr) {
    *ready = true;  // every rank voted ncclReady, which requires its group on this device
    return Status::ok();
  }
  std::string why;
  const GpuPluginApi* api = GpuPlugin::load(&why);
  const CudaDriver* driver = CudaDriver::inProcess();
  const TorusGrid* grid = state.torusGrid ? &*state.torusGrid : nullptr;
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
  generate(state.facts.rank == 0, mine.worldId);
  generate(grid != nullptr && grid->rowIndex == 0, mine.rowId);
  generate(grid != nullptr && grid->columnIndex == 0, mine.columnId);
  std::vector<NcclSetupRecord> all(static_cast<size_t>(state.facts.size));
  int rc = PMPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE,
                          state.privateComm);
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
    spec.worldSize = state.facts.size;
    spec.worldRank = state.facts.rank;
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
      const int rc = PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, state.privateComm);
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
    if (state.facts.rank == 0 || (!created && !why.empty()))
      GFSHIM_WARN(kEngine,
                  "NCCL not used on this communicator of %d ranks: %s; its GPU buffers are "
                  "staged through host memory",
                  state.facts.size, gpu.ncclUnusable.c_str());
    return Status::ok();
  }
  gpu.ncclDevice = device;
  *ready = true;
  GFSHIM_INFO(kEngine, "NCCL communicators made on GPU %d for %d ranks%s", device, state.facts.size,
              grid != nullptr ? " (world, torus row and column)" : "");
  return Status::ok();
}

void CommRegistry::stop() {
  if (keyval_ == MPI_KEYVAL_INVALID) return;
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    void* attribute = nullptr;
    int found = 0;
    PMPI_Comm_get_attr(comm, keyval_, &attribute, &found);
    if (found) PMPI_Comm_delete_attr(comm, keyval_);
  }
  PMPI_Comm_free_keyval(&keyval_);
}

}  // namespace gfshim
