#include "topo/local_topology.h"

#include <fstream>
#include <sstream>

#include "common/log.h"
#include "topo/hardware_probe.h"

namespace gfshim {
namespace {

bool readFile(const std::string& path, std::string* contents) {
  std::ifstream file(path);
  if (!file) return false;
  std::ostringstream buffer;
  buffer << file.rdbuf();
  *contents = buffer.str();
  return true;
}

}  // namespace

LocalTopology loadLocalTopology(const Settings& settings) {
  LocalTopology local;
  if (!settings.topoFile.empty()) {
    std::string text, why;
    if (!readFile(settings.topoFile, &text)) {
      GFSHIM_WARN(kConfig, "GFSHIM_TOPO_FILE='%s' cannot be read; detecting the topology instead",
                  settings.topoFile.c_str());
    } else if (!parseTopology(text, &local.topology, &why)) {
      GFSHIM_WARN(kConfig, "GFSHIM_TOPO_FILE='%s' is invalid: %s; detecting the topology instead",
                  settings.topoFile.c_str(), why.c_str());
      local.topology = Topology();
    } else {
      local.layoutFromFile = local.topology.nodes > 0;
      local.hardwareSource = local.transportSource = "GFSHIM_TOPO_FILE=" + settings.topoFile;
      GFSHIM_INFO(kInit, "topology read from GFSHIM_TOPO_FILE='%s'", settings.topoFile.c_str());
      return local;
    }
  }
  if (!settings.probeHwloc) {
    local.hardwareSource = "not used: disabled by GFSHIM_TOPO_DETECT";
  } else if (Status status = probeHwloc(&local.topology.hardware); !status.isOk()) {
    local.hardwareSource = "not used: " + status.message();
  } else {
    local.hardwareSource = "hwloc";
  }
  if (!settings.probeUcx) {
    local.transportSource = "not used: disabled by GFSHIM_TOPO_DETECT";
  } else if (Status status = probeUcx(&local.topology.transports); !status.isOk()) {
    local.transportSource = "not used: " + status.message();
  } else {
    local.transportSource = "UCX";
  }
  if (local.hardwareSource != "hwloc") {
    GFSHIM_INFO(kInit, "hwloc %s; node hardware unknown", local.hardwareSource.c_str());
  }
  if (local.transportSource != "UCX") {
    GFSHIM_INFO(kInit, "UCX %s; link costs from parameters or defaults",
                local.transportSource.c_str());
  }
  return local;
}

}  // namespace gfshim
