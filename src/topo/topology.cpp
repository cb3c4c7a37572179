#include "topo/topology.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace gfshim {
namespace {

constexpr double kBitsPerByte = 8;

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string formatLink(const LinkCost& link) {
  return "gbps=" + formatNumber(link.bytesPerSecond * kBitsPerByte / 1e9) +
         " latency_us=" + formatNumber(link.latencySeconds * 1e6);
}

std::string formatDevice(const PciDevice& device) {
  return device.name + " pci=" + device.pciBus + " numa=" + std::to_string(device.numaNode);
}

const char* linkClassName(LinkClass linkClass) {
  return linkClass == LinkClass::kIntraNode ? "intra" : "inter";
}

bool parseInt(const std::string& text, int low, int* out) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || value < low || value > 1 << 30) {
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

// Up to and including 1e12: formatTopology's 6 digits round 999999999999.9 up to "1e+12", and a
// dump must read back.
bool parseDecimal(const std::string& text, double* out) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value >= 0 && value <= 1e12)) {
    return false;
  }
  *out = value;
  return true;
}

// "NAME key=value key=value": the leading name (when wanted) and the attributes. Every
// attribute in `required` must appear, and no other.
bool parseAttributes(const std::string& value, bool hasName,
                     const std::vector<std::string>& required, std::string* name,
                     std::vector<std::string>* values, std::string* why) {
  std::istringstream words(value);
  std::string word;
  if (hasName && !(words >> *name)) {
    *why = "a name is missing";
    return false;
  }
  values->assign(required.size(), "");
  std::vector<bool> seen(required.size(), false);
  while (words >> word) {
    const size_t equals = word.find('=');
    const std::string key = word.substr(0, equals);
    size_t index = 0;
    while (index < required.size() && required[index] != key) ++index;
    if (equals == std::string::npos || index == required.size() || seen[index]) {
      *why = "unexpected '" + word + "'";
      return false;
    }
    seen[index] = true;
    (*values)[index] = word.substr(equals + 1);
  }
  for (size_t i = 0; i < required.size(); ++i) {
    if (!seen[i]) {
      *why = "'" + required[i] + "=' is missing";
      return false;
    }
  }
  return true;
}

bool parseLink(const std::string& value, LinkCost* link, std::string* why) {
  std::string ignored;
  std::vector<std::string> values;
  if (!parseAttributes(value, false, {"gbps", "latency_us"}, &ignored, &values, why)) return false;
  double gbps = 0, latencyUs = 0;
  if (!parseDecimal(values[0], &gbps) || gbps <= 0) {
    *why = "gbps must be a positive number, not '" + values[0] + "'";
    return false;
  }
  if (!parseDecimal(values[1], &latencyUs)) {
    *why = "latency_us must be a number >= 0, not '" + values[1] + "'";
    return false;
  }
  link->bytesPerSecond = gbps * 1e9 / kBitsPerByte;
  link->latencySeconds = latencyUs * 1e-6;
  return true;
}

bool parseDevice(const std::string& value, PciDevice* device, std::string* why) {
  std::vector<std::string> values;
  if (!parseAttributes(value, true, {"pci", "numa"}, &device->name, &values, why)) return false;
  device->pciBus = values[0];
  if (!parseInt(values[1], -1, &device->numaNode)) {
    *why = "numa must be a NUMA node index or -1, not '" + values[1] + "'";
    return false;
  }
  return true;
}

bool parseTransport(const std::string& value, UcxTransport* transport, std::string* why) {
  std::vector<std::string> values;
  if (!parseAttributes(value, true, {"class", "gbps", "latency_us"}, &transport->name, &values,
                       why)) {
    return false;
  }
  if (values[0] != "intra" && values[0] != "inter") {
    *why = "class must be intra or inter, not '" + values[0] + "'";
    return false;
  }
  transport->linkClass = values[0] == "intra" ? LinkClass::kIntraNode : LinkClass::kInterNode;
  LinkCost link;
  if (!parseLink("gbps=" + values[1] + " latency_us=" + values[2], &link, why)) return false;
  transport->bytesPerSecond = link.bytesPerSecond;
  transport->latencySeconds = link.latencySeconds;
  return true;
}

// Loopback network devices carry no traffic between nodes.
bool isLoopback(const std::string& transportName) {
  const size_t slash = transportName.find('/');
  return slash != std::string::npos && transportName.compare(slash + 1, 2, "lo") == 0 &&
         transportName.size() == slash + 3;
}

void resolveLink(LinkClass linkClass, double overrideGbps, double overrideLatencyUs,
                 double defaultGbps, double defaultLatencyUs, const Topology& topology, bool* has,
                 LinkCost* link, std::string* source) {
  if (!*has) {
    const UcxTransport* best = nullptr;
    for (const UcxTransport& transport : topology.transports) {
      if (transport.linkClass != linkClass || isLoopback(transport.name)) continue;
      if (best == nullptr || transport.bytesPerSecond > best->bytesPerSecond) best = &transport;
    }
    if (best != nullptr) {
      link->bytesPerSecond = best->bytesPerSecond;
      link->latencySeconds = best->latencySeconds;
      *source = "UCX " + best->name;
    } else {
      link->bytesPerSecond = defaultGbps * 1e9 / kBitsPerByte;
      link->latencySeconds = defaultLatencyUs * 1e-6;
      *source = "default";
    }
    *has = true;
  }
  if (overrideGbps > 0) link->bytesPerSecond = overrideGbps * 1e9 / kBitsPerByte;
  if (overrideLatencyUs > 0) link->latencySeconds = overrideLatencyUs * 1e-6;
  if (overrideGbps > 0 || overrideLatencyUs > 0) *source += " + parameters";
}

}  // namespace

void resolveLinkCosts(const LinkOverrides& overrides, Topology* topology) {
  resolveLink(LinkClass::kIntraNode, overrides.intraGbps, overrides.intraLatencyUs,
              kDefaultIntraGbps, kDefaultIntraLatencyUs, *topology, &topology->hasIntraLink,
              &topology->intraLink, &topology->intraLinkSource);
  resolveLink(LinkClass::kInterNode, overrides.interGbps, overrides.interLatencyUs,
              kDefaultInterGbps, kDefaultInterLatencyUs, *topology, &topology->hasInterLink,
              &topology->interLink, &topology->interLinkSource);
}

std::string formatTopology(const Topology& topology) {
  std::ostringstream out;
  out << "# libgfshim topology (GFSHIM_TOPO_FILE reads this format)\n";
  if (topology.nodes > 0 && topology.ranksPerNode > 0) {
    out << "nodes = " << topology.nodes << "\nranks_per_node = " << topology.ranksPerNode << "\n";
  }
  const NodeHardware& hw = topology.hardware;
  // Each count on its own: a file may give some of them (0: not given, and not valid to write).
  const std::pair<const char*, int> counts[] = {{"packages", hw.packages},
                                                {"numa_nodes", hw.numaNodes},
                                                {"cores", hw.cores},
                                                {"pus", hw.pus}};
  for (const auto& [key, count] : counts) {
    if (count > 0) out << key << " = " << count << "\n";
  }
  for (const PciDevice& gpu : hw.gpus) out << "gpu = " << formatDevice(gpu) << "\n";
  for (const PciDevice& nic : hw.nics) out << "nic = " << formatDevice(nic) << "\n";
  for (const UcxTransport& transport : topology.transports) {
    out << "transport = " << transport.name << " class=" << linkClassName(transport.linkClass)
        << " " << formatLink({transport.latencySeconds, transport.bytesPerSecond}) << "\n";
  }
  if (topology.hasIntraLink) out << "intra_link = " << formatLink(topology.intraLink) << "\n";
  if (topology.hasInterLink) out << "inter_link = " << formatLink(topology.interLink) << "\n";
  return out.str();
}

bool parseTopology(const std::string& text, Topology* topology, std::string* why) {
  Topology parsed;
  std::istringstream lines(text);
  std::string line;
  bool hasNodes = false, hasRanksPerNode = false;
  for (int lineNo = 1; std::getline(lines, line); ++lineNo) {
    const std::string content = trim(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    const size_t equals = content.find('=');
    const std::string key = trim(content.substr(0, equals));
    const std::string value = equals == std::string::npos ? "" : trim(content.substr(equals + 1));
    std::string problem;
    NodeHardware& hw = parsed.hardware;
    const std::vector<std::pair<const char*, int*>> counts = {
        {"nodes", &parsed.nodes},   {"ranks_per_node", &parsed.ranksPerNode},
        {"packages", &hw.packages}, {"numa_nodes", &hw.numaNodes},
        {"cores", &hw.cores},       {"pus", &hw.pus}};
    bool known = false;
    for (const auto& [name, field] : counts) {
      if (key != name) continue;
      known = true;
      if (!parseInt(value, 1, field))
        problem = key + " must be a positive integer, not '" + value + "'";
      hasNodes |= key == "nodes";
      hasRanksPerNode |= key == "ranks_per_node";
    }
    if (known) {
      // handled above
    } else if (equals == std::string::npos) {
      problem = "'" + content + "' is not of the form key = value";
    } else if (key == "gpu" || key == "nic") {
      PciDevice device;
      if (parseDevice(value, &device, &problem))
        (key == "gpu" ? hw.gpus : hw.nics).push_back(device);
    } else if (key == "transport") {
      UcxTransport transport;
      if (parseTransport(value, &transport, &problem)) parsed.transports.push_back(transport);
    } else if (key == "intra_link") {
      parsed.hasIntraLink = parseLink(value, &parsed.intraLink, &problem);
      parsed.intraLinkSource = "topology file";
    } else if (key == "inter_link") {
      parsed.hasInterLink = parseLink(value, &parsed.interLink, &problem);
      parsed.interLinkSource = "topology file";
    } else {
      problem = "unknown key '" + key +
                "' (known: nodes, ranks_per_node, packages, numa_nodes, cores, pus, gpu, nic, "
                "transport, intra_link, inter_link)";
    }
    if (!problem.empty()) {
      *why = "line " + std::to_string(lineNo) + ": " + problem;
      return false;
    }
  }
  if (hasNodes != hasRanksPerNode) {
    *why = "nodes and ranks_per_node must be given together";
    return false;
  }
  *topology = parsed;
  return true;
}

std::string describeTopology(const Topology& topology) {
  auto plural = [](int n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  std::string text = topology.nodes > 0
                         ? plural(topology.nodes, "node") + " x " +
                               (topology.ranksPerNode > 0 ? plural(topology.ranksPerNode, "rank")
                                                          : std::string("uneven ranks"))
                         : std::string("node layout unknown");
  const NodeHardware& hw = topology.hardware;
  if (hw.packages > 0) {
    text += "; per node " + plural(hw.packages, "package") + ", " +
            plural(hw.numaNodes, "NUMA node") + ", " + plural(hw.cores, "core") + ", " +
            plural(static_cast<int>(hw.gpus.size()), "GPU") + ", " +
            plural(static_cast<int>(hw.nics.size()), "NIC");
  }
  text += "; intra-node " + formatLink(topology.intraLink) + " (" + topology.intraLinkSource +
          "), inter-node " + formatLink(topology.interLink) + " (" + topology.interLinkSource + ")";
  return text;
}

}  // namespace gfshim
