// Collective topology detection over a communicator, run once per communicator at its setup
// (the first engine call). Every rank ends with the same Topology and node map:
//
//   node layout   MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) + broadcast of the node's first
//                 rank + allgather (the MPI baseline, always available), or the layout of
//                 GFSHIM_TOPO_FILE when its nodes x ranks_per_node equals the world size
//   hardware      hwloc, probed once per process; the ranks' descriptions are compared, and the
//                 INFO line says when nodes differ
//   link costs    GFSHIM_*_GBPS / _LATENCY_US, else the file's links, else UCX's best transport
//                 per class, else defaults; then agreed with one MAX allreduce (the highest
//                 latency and the lowest bandwidth of any rank), so the cost model decides
//                 identically everywhere
//
// A probe that is disabled, not built in or failing is reported once per process at INFO, and
// the MPI baseline and defaults are used.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "topo/topology.h"

namespace gfshim {

struct CommTopology {
  Topology topology;            // agreed across the communicator's ranks
  std::vector<int> nodeOfRank;  // per communicator rank; equal ids mean the same node
  bool hardwareUniform = true;  // every rank described the same node hardware
  // The most of the job's ranks a CPU runs on any node of the communicator, or on a host that
  // nodes share (see learnWorldNode); above 1: oversubscribed; 0 when unknown.
  double ranksPerCpu = 0;
  // The cost model's figures of the MPI and the CPU, agreed: what a rendezvous message costs
  // beyond its latency (GFSHIM_RENDEZVOUS_US, the highest) and how fast a rank reduces
  // (GFSHIM_REDUCE_GBPS, the lowest).
  double rendezvousSeconds = 0;
  double reduceBytesPerSecond = 0;
  std::string hardwareSource;  // this rank's, see LocalTopology
  std::string transportSource;
};

// Collective over MPI_COMM_WORLD, once, from the init hook: learns this rank's node
// (MPI_COMM_TYPE_SHARED), so that detectTopology afterwards creates no communicator, and how
// many of the job's ranks share the node and how many CPUs their affinity gives them; the same
// for the host, which several nodes the MPI sees may share (one kernel). The fusion
// threads detect on their own communicators while the application may be creating its own, and
// Open MPI 4.1 hung when threads created communicators concurrently (ompi_comm_nextcid).
Status learnWorldNode();
// Whether this rank's node runs more of the job's ranks than it has CPUs for (the union of their
// affinity masks, capped by the node hardware's processing units: hwloc's or GFSHIM_TOPO_FILE's
// `pus`), or its host does; false before learnWorldNode or when unknown. Local: the caller
// agrees it.
bool worldNodeOversubscribed(const Settings& settings);

// Collective over `comm`: every rank must call it. MPI errors come back as a Status.
Status detectTopology(MPI_Comm comm, const Settings& settings, CommTopology* detected);

}  // namespace gfshim
