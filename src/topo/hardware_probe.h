// Probes of this node's hardware and network, each optional: they fail with a Status when the
// build lacks the library's headers or the library cannot be loaded, and the caller then uses
// the MPI baseline (node layout) and the default link figures.
#pragma once

#include <vector>

#include "common/status.h"
#include "topo/topology.h"

namespace gfshim {

// hwloc (libhwloc.so.15): packages, NUMA nodes, cores, PUs, GPUs (PCI display / 3D controllers)
// and network cards (network and OpenFabrics OS devices on a PCI device), each with its PCI bus
// id and nearest NUMA node. I/O discovery is enabled (KEEP_IMPORTANT filter).
Status probeHwloc(NodeHardware* hardware);

// UCX (libuct.so.0, libucs.so.0): every transport on every device of every memory domain, with
// the bandwidth (dedicated + shared) and latency (constant + overhead) its interface reports;
// shared-memory devices are intra-node links, network devices inter-node ones. Self and
// accelerator transports are skipped.
Status probeUcx(std::vector<UcxTransport>* transports);

}  // namespace gfshim
