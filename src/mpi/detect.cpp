#include "mpi/detect.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "common/log.h"
#include "mpi/pmpi_transport.h"
#include "topo/local_topology.h"

namespace gfshim {
namespace {

// The probes run once per process; every communicator's setup reuses their result.
const LocalTopology& localTopology(const Settings& settings) {
  static std::once_flag once;
  static LocalTopology local;
  std::call_once(once, [&settings] { local = loadLocalTopology(settings); });
  return local;
}

// This rank's node as the world rank of its node's first rank, once learnWorldNode has run.
std::atomic<int64_t> gWorldNode{-1};
// How many of the job's ranks share this rank's node, and how many CPUs they may run on (the
// union of their affinity masks), once learnWorldNode has run; 0: unknown.
std::atomic<int> gWorldRanksOnNode{0};
std::atomic<int> gWorldCpusOnNode{0};
// The same for this rank's machine (machineOfRank), which can hold several nodes; 0: unknown.
std::atomic<int> gWorldRanksOnMachine{0};
std::atomic<int> gWorldCpusOnMachine{0};

// The union of the affinity masks of the node's ranks: the CPUs they share. Ranks bound to one
// core each count one CPU each; unbound ranks all count every CPU of the node. Under SimGrid SMPI
// every simulated rank runs in the one simulating process, whose mask says nothing of the
// simulated hosts: unknown (0), so only the node's description counts.
Status cpusOfNode(MPI_Comm node, int* cpus) {
#if defined(GFSHIM_SMPI)
  (void)node;
  *cpus = 0;
  return Status::ok();
#else
  cpu_set_t mine;
  CPU_ZERO(&mine);
  // A rank that cannot read its mask still takes part (an empty mask adds nothing).
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) CPU_ZERO(&mine);
  cpu_set_t all;
  const int rc =
      PMPI_Allreduce(&mine, &all, static_cast<int>(sizeof(mine)), MPI_BYTE, MPI_BOR, node);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce", rc);
  *cpus = CPU_COUNT(&all);
  return Status::ok();
#endif
}

// How many of `world`'s ranks run on this rank's machine, and on how many CPUs (cpusOfNode's
// union of masks); collective over `world`. A machine is one kernel: ranks whose
// /proc/sys/kernel/random/boot_id match, whatever host names the MPI sees. So the nodes of an
// emulated cluster (network and host-name namespaces on one host) count as one machine, whose
// cores they share: 8 ranks of 4 such nodes on 2 cores are oversubscribed though every node
// has 2 CPUs for its 2 ranks. Unknown (0) where a rank cannot read the id, where two machines'
// ids share a hash, and under SimGrid SMPI (every simulated rank runs in one process).
Status machineOfRank(MPI_Comm world, int* ranks, int* cpus) {
  *ranks = 0;
  *cpus = 0;
#if defined(GFSHIM_SMPI)
  (void)world;
  return Status::ok();
#else
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  const size_t hash = std::hash<std::string>()(bootId);
  const int color = bootId.empty() ? MPI_UNDEFINED : static_cast<int>(hash & 0x3fffffff);
  MPI_Comm machine = MPI_COMM_NULL;
  int rc = PMPI_Comm_split(world, color, 0, &machine);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Comm_split", rc);
  if (machine == MPI_COMM_NULL) return Status::ok();
  // The whole id's hash, the same on every member unless two machines' colors collided: its
  // highest and (negated) lowest in one allreduce.
  const int64_t full = static_cast<int64_t>(hash >> 1);
  int64_t extremes[2] = {full, -full};
  rc = PMPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT64_T, MPI_MAX, machine);
  Status status = rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Allreduce", rc);
  if (status.isOk() && extremes[0] == -extremes[1]) {
    PMPI_Comm_size(machine, ranks);
    status = cpusOfNode(machine, cpus);
  }
  PMPI_Comm_free(&machine);
  return status;
#endif
}

// The node of this rank by the MPI baseline: the communicator rank of its node's first member.
// With `learn` (MPI_COMM_WORLD, once) also how crowded the node is.
Status sharedMemoryNodeId(MPI_Comm comm, int64_t* nodeId, bool learn = false) {
  const int64_t worldNode = gWorldNode.load(std::memory_order_acquire);
  if (worldNode >= 0) {
    *nodeId = worldNode;
    return Status::ok();
  }
  MPI_Comm node = MPI_COMM_NULL;
  int rc = PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Comm_split_type", rc);
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  rc = PMPI_Bcast(&rank, 1, MPI_INT, 0, node);
  Status status = rc == MPI_SUCCESS ? Status::ok() : mpiErrorStatus("PMPI_Bcast", rc);
  if (status.isOk() && learn) {
    int ranks = 0, cpus = 0;
    PMPI_Comm_size(node, &ranks);
    status = cpusOfNode(node, &cpus);
    gWorldRanksOnNode.store(ranks, std::memory_order_relaxed);
    gWorldCpusOnNode.store(cpus, std::memory_order_relaxed);
  }
  PMPI_Comm_free(&node);
  *nodeId = rank;
  return status;
}

// How many of the job's ranks each CPU of this rank's node runs: over the fewer of the CPUs the
// ranks' affinity allows and the processing units the node's description gives (hwloc, or
// GFSHIM_TOPO_FILE's `pus`); or of its machine, where that is more crowded (machineOfRank: nodes
// sharing one host). 0 when unknown.
double nodeRanksPerCpu(const NodeHardware& hardware) {
  const int ranks = gWorldRanksOnNode.load(std::memory_order_relaxed);
  int cpus = gWorldCpusOnNode.load(std::memory_order_relaxed);
  if (hardware.pus > 0) cpus = cpus > 0 ? std::min(cpus, hardware.pus) : hardware.pus;
  const int machineRanks = gWorldRanksOnMachine.load(std::memory_order_relaxed);
  const int machineCpus = gWorldCpusOnMachine.load(std::memory_order_relaxed);
  const double node = ranks > 0 && cpus > 0 ? static_cast<double>(ranks) / cpus : 0;
  const double machine =
      machineRanks > 0 && machineCpus > 0 ? static_cast<double>(machineRanks) / machineCpus : 0;
  return std::max(node, machine);
}

// The node of this rank by the file's layout (world rank / ranks_per_node), when it describes
// this world; otherwise false, with a warning from world rank 0.
bool fileNodeId(const Topology& file, int64_t* nodeId) {
  int worldRank = 0, worldSize = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  PMPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  if (static_cast<int64_t>(file.nodes) * file.ranksPerNode != worldSize) {
    static std::atomic<bool> warned{false};
    if (worldRank == 0 && !warned.exchange(true)) {
      GFSHIM_WARN(kConfig,
                  "GFSHIM_TOPO_FILE describes %d nodes x %d ranks, but the job has %d ranks; "
                  "the node layout is detected instead",
                  file.nodes, file.ranksPerNode, worldSize);
    }
    return false;
  }
  *nodeId = worldRank / file.ranksPerNode;
  return true;
}

int64_t hardwareHash(const NodeHardware& hardware) {
  Topology onlyHardware;
  onlyHardware.hardware = hardware;
  return static_cast<int64_t>(std::hash<std::string>()(formatTopology(onlyHardware)) >> 1);
}

void writeDumpOnce(const Settings& settings, int rank, const Topology& topology) {
  static std::atomic<bool> written{false};
  if (settings.topoDump.empty() || rank != 0 || written.exchange(true)) return;
  std::ofstream file(settings.topoDump);
  file << formatTopology(topology);
  if (!file) {
    GFSHIM_WARN(kConfig, "GFSHIM_TOPO_DUMP='%s' cannot be written", settings.topoDump.c_str());
  } else {
    GFSHIM_INFO(kInit, "topology written to GFSHIM_TOPO_DUMP='%s'", settings.topoDump.c_str());
  }
}

}  // namespace

Status learnWorldNode() {
  int64_t node = 0;
  GFSHIM_RETURN_IF_ERROR(sharedMemoryNodeId(MPI_COMM_WORLD, &node, true));
  gWorldNode.store(node, std::memory_order_release);
  int ranks = 0, cpus = 0;
  GFSHIM_RETURN_IF_ERROR(machineOfRank(MPI_COMM_WORLD, &ranks, &cpus));
  gWorldRanksOnMachine.store(ranks, std::memory_order_relaxed);
  gWorldCpusOnMachine.store(cpus, std::memory_order_relaxed);
  return Status::ok();
}

bool worldNodeOversubscribed(const Settings& settings) {
  return nodeRanksPerCpu(localTopology(settings).topology.hardware) > 1;
}

Status detectTopology(MPI_Comm comm, const Settings& settings, CommTopology* detected) {
  const LocalTopology& local = localTopology(settings);
  int rank = 0, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  Topology topology = local.topology;

  // Node, hardware hash, the node's ranks a CPU in units of 1/kRanksPerCpuScale.
  constexpr int kFields = 3;
  constexpr double kRanksPerCpuScale = 1024;
  int64_t mine[kFields] = {
      0, hardwareHash(topology.hardware),
      static_cast<int64_t>(std::lround(nodeRanksPerCpu(topology.hardware) * kRanksPerCpuScale))};
  if (!(local.layoutFromFile && fileNodeId(topology, &mine[0]))) {
    GFSHIM_RETURN_IF_ERROR(sharedMemoryNodeId(comm, &mine[0]));
  }
  std::vector<int64_t> all(kFields * static_cast<size_t>(size));
  int rc = PMPI_Allgather(mine, kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, comm);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allgather", rc);

  detected->nodeOfRank.assign(static_cast<size_t>(size), 0);
  detected->hardwareUniform = true;
  int64_t crowdedMost = 0;
  std::map<int64_t, int> ranksOnNode;
  for (int r = 0; r < size; ++r) {
    const int64_t* theirs = &all[kFields * static_cast<size_t>(r)];
    detected->nodeOfRank[static_cast<size_t>(r)] = static_cast<int>(theirs[0]);
    ++ranksOnNode[theirs[0]];
    detected->hardwareUniform &= theirs[1] == mine[1];
    crowdedMost = std::max(crowdedMost, theirs[2]);
  }
  detected->ranksPerCpu = static_cast<double>(crowdedMost) / kRanksPerCpuScale;
  topology.nodes = static_cast<int>(ranksOnNode.size());
  topology.ranksPerNode = ranksOnNode.begin()->second;
  for (const auto& entry : ranksOnNode) {
    if (entry.second != topology.ranksPerNode) topology.ranksPerNode = 0;
  }

  resolveLinkCosts(
      {settings.intraGbps, settings.intraLatencyUs, settings.interGbps, settings.interLatencyUs},
      &topology);
  // One agreement, MPI_MAX throughout: the highest latencies, the lowest rates (negated).
  double costs[6] = {topology.intraLink.latencySeconds, topology.interLink.latencySeconds,
                     -topology.intraLink.bytesPerSecond, -topology.interLink.bytesPerSecond,
                     settings.rendezvousUs * 1e-6, -settings.reduceGbps * 1e9 / 8};
  rc = PMPI_Allreduce(MPI_IN_PLACE, costs, 6, MPI_DOUBLE, MPI_MAX, comm);
  if (rc != MPI_SUCCESS) return mpiErrorStatus("PMPI_Allreduce", rc);
  topology.intraLink = {costs[0], -costs[2]};
  topology.interLink = {costs[1], -costs[3]};
  detected->rendezvousSeconds = costs[4];
  detected->reduceBytesPerSecond = -costs[5];

  writeDumpOnce(settings, rank, topology);
  detected->topology = topology;
  detected->hardwareSource = local.hardwareSource;
  detected->transportSource = local.transportSource;
  return Status::ok();
}

}  // namespace gfshim
