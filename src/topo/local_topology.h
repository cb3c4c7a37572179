// What one process knows about the topology before talking to other ranks: the contents of
// GFSHIM_TOPO_FILE, or the results of the enabled probes (hwloc, UCX). No MPI here: the shim's
// collective detection (detect.h) and the single-process gfshim-info both start from it.
#pragma once

#include <string>

#include "config/config.h"
#include "topo/topology.h"

namespace gfshim {

struct LocalTopology {
  Topology topology;            // links not yet resolved (resolveLinkCosts)
  bool layoutFromFile = false;  // the file gave nodes and ranks_per_node
  // Where the hardware and the transports came from, or why they are missing: "hwloc",
  // "GFSHIM_TOPO_FILE=/x", "not used: cannot load libhwloc.so.15: ...", ...
  std::string hardwareSource;
  std::string transportSource;
};

// Reads the file, or runs the probes GFSHIM_TOPO_DETECT enables. A file that cannot be read or
// parsed is reported at WARN and detection runs instead; each probe not used is reported at INFO.
LocalTopology loadLocalTopology(const Settings& settings);

}  // namespace gfshim
