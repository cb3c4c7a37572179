// The topology value: how a communicator's ranks sit on nodes, what hardware a node has (hwloc)
// and what the links between ranks cost (UCX's figures, parameters, or defaults). Plain data,
// independent of MPI: src/mpi/detect.cpp fills it collectively and agrees it across ranks,
// the policy's cost model reads its link costs, gfshim-info prints it, and GFSHIM_TOPO_FILE /
// GFSHIM_TOPO_DUMP read and write it in the text format below.
//
// Text format (one `key = value` per line, `#` starts a comment, every key optional):
//
//   nodes = 64                      node layout: ranks are numbered node by node, so world rank
//   ranks_per_node = 8              r sits on node r / ranks_per_node (both or neither)
//   packages = 2                    hardware of one node (hwloc)
//   numa_nodes = 2
//   cores = 64
//   pus = 128
//   gpu = cuda0 pci=0000:07:00.0 numa=0          one line per GPU
//   nic = mlx5_0 pci=0000:0c:00.0 numa=0         one line per PCI network device
//   transport = rc_mlx5/mlx5_0:1 class=inter gbps=200 latency_us=1.5   one line per UCX transport
//   intra_link = gbps=100 latency_us=1          the link costs the cost model uses; absent: the
//   inter_link = gbps=200 latency_us=2          best transport of the class, else the defaults
#pragma once

#include <string>
#include <vector>

namespace gfshim {

struct LinkCost {
  double latencySeconds = 0;  // alpha, per message
  double bytesPerSecond = 1;  // beta, of one link (a node's NIC between nodes)
};

enum class LinkClass { kIntraNode, kInterNode };

// A PCI device of a node (GPU or network card) and the NUMA node it is attached to.
struct PciDevice {
  std::string name;    // the OS device, e.g. "cuda0", "eth0", "mlx5_0"
  std::string pciBus;  // "0000:07:00.0"
  int numaNode = -1;   // logical index of the nearest NUMA node; -1 when unknown
};

struct NodeHardware {
  int packages = 0;  // 0: unknown (hwloc unavailable)
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;
  std::vector<PciDevice> gpus;
  std::vector<PciDevice> nics;
};

// A UCX transport on a device, with the bandwidth and latency UCX reports for it.
struct UcxTransport {
  std::string name;  // "tcp/eth0", "posix/memory"
  LinkClass linkClass = LinkClass::kInterNode;
  double bytesPerSecond = 0;
  double latencySeconds = 0;
};

// What the user set to override the link figures (0: not set); see GFSHIM_*_GBPS/_LATENCY_US.
struct LinkOverrides {
  double intraGbps = 0, intraLatencyUs = 0, interGbps = 0, interLatencyUs = 0;
};

struct Topology {
  int nodes = 0;         // 0: unknown
  int ranksPerNode = 0;  // 0: unknown, or nodes hold different numbers of ranks
  NodeHardware hardware;
  std::vector<UcxTransport> transports;
  // The figures the cost model uses, and where each came from ("UCX tcp/eth0", "default", ...).
  LinkCost intraLink;
  LinkCost interLink;
  std::string intraLinkSource;
  std::string interLinkSource;
  bool hasIntraLink = false;  // set by a file's intra_link line or by linkCostsFrom
  bool hasInterLink = false;
};

// Built-in link figures, used when neither a parameter, a topology file nor UCX gives one.
constexpr double kDefaultIntraGbps = 100, kDefaultIntraLatencyUs = 1;
constexpr double kDefaultInterGbps = 10, kDefaultInterLatencyUs = 20;

// Fills topology->intraLink/interLink (and their sources) where not already set: a parameter
// override wins, then a link given by the file, then the best UCX transport of the class
// (highest bandwidth; loopback devices excluded), then the defaults above.
void resolveLinkCosts(const LinkOverrides& overrides, Topology* topology);

// The text format above. formatTopology's output parses back to an equal value.
std::string formatTopology(const Topology& topology);
// On failure returns false and sets *why to "line N: what is wrong".
bool parseTopology(const std::string& text, Topology* topology, std::string* why);

// One-line summary for logs: "2 nodes x 2 ranks; 1 package, 1 NUMA node, 2 cores, 0 GPUs, 1 NIC".
std::string describeTopology(const Topology& topology);

}  // namespace gfshim
