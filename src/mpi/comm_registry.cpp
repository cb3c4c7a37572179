#include "mpi/comm_registry.h"

#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "mpi/detect.h"

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

CommState::~CommState() {
  fusion.reset();  // completes what is still queued
  engine.reset();
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
  CommFacts facts;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  facts.interComm = inter != 0;
  PMPI_Comm_size(comm, &facts.size);
  PMPI_Comm_rank(comm, &facts.rank);
  facts.spansWorlds = !facts.interComm && spansWorlds(comm, facts.size);
  facts.paramsAgree = paramsAgree;
  auto created = std::make_unique<CommState>(facts);
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
  facts->ranksPerCpu = detected.ranksPerCpu;
  facts->rendezvousSeconds = detected.rendezvousSeconds;
  facts->reduceBytesPerSecond = detected.reduceBytesPerSecond;
  std::string why;
  const std::optional<TorusGrid> nodeGrid =
      torusGridFromNodes(facts->rank, detected.nodeOfRank, &why);
  *torusGrid = settings.torusX > 0
                   ? torusGridFromDims(facts->rank, facts->size, {settings.torusX, settings.torusY})
                   : nodeGrid;
  char crowded[128] = "";
  if (detected.ranksPerCpu > 1) {
    std::snprintf(crowded, sizeof(crowded),
                  "; oversubscribed (more ranks than CPUs on a node, or on the host that nodes "
                  "share: %.2g ranks a CPU)",
                  detected.ranksPerCpu);
  }
  GFSHIM_INFO(kEngine, "set up a communicator of %d ranks: %s%s%s%s", facts->size,
              describeTopology(topology).c_str(), crowded,
              nodeGrid ? "" : "; no node grid: ", nodeGrid ? "" : why.c_str());
  if (!detected.hardwareUniform && facts->rank == 0) {
    GFSHIM_INFO(kEngine, "nodes describe different hardware; rank 0's is shown");
  }
  return Status::ok();
}

Status CommRegistry::prepareFusion(MPI_Comm comm, CommState& state) {
  if (state.fusionComm != MPI_COMM_NULL) return Status::ok();
  return createPrivateComm(comm, state.facts().rank, &state.fusionComm);
}

Status CommRegistry::ensureSetUp(MPI_Comm comm, const Settings& settings, Stats* stats,
                                 CommState& state) {
  if (state.engine->isSetUp()) return Status::ok();
  if (state.privateComm == MPI_COMM_NULL) {
    GFSHIM_RETURN_IF_ERROR(createPrivateComm(comm, state.facts().rank, &state.privateComm));
  }
  if (settings.fusionAvailable) GFSHIM_RETURN_IF_ERROR(prepareFusion(comm, state));
  GFSHIM_RETURN_IF_ERROR(state.engine->setUp(state.privateComm, settings, stats, nullptr));
  return state.engine->agreeOnCudaDriver();
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
