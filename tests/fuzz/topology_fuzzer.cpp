// libFuzzer target for the GFSHIM_TOPO_FILE format: parseTopology, the function
// loadLocalTopology runs on the file's text.
//
// Properties beyond "no crash, no sanitizer report":
//   - a rejected file says why;
//   - an accepted file, written back with formatTopology (what GFSHIM_TOPO_DUMP writes),
//     parses again to an equal value (decimals equal to formatTopology's 6 significant digits);
//   - the link costs resolve and the summary line is built.
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "topo/topology.h"

using namespace gfshim;

namespace {

bool closeEnough(double a, double b) {
  // formatTopology prints 6 significant digits; 1e-300 absorbs subnormal figures.
  return std::fabs(a - b) <= 1e-5 * std::fmax(std::fabs(a), std::fabs(b)) + 1e-300;
}

bool sameDevices(const std::vector<PciDevice>& a, const std::vector<PciDevice>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].pciBus != b[i].pciBus || a[i].numaNode != b[i].numaNode)
      return false;
  }
  return true;
}

bool sameLink(const LinkCost& a, const LinkCost& b) {
  return closeEnough(a.latencySeconds, b.latencySeconds) &&
         closeEnough(a.bytesPerSecond, b.bytesPerSecond);
}

bool sameTopology(const Topology& a, const Topology& b) {
  if (a.nodes != b.nodes || a.ranksPerNode != b.ranksPerNode) return false;
  const NodeHardware &x = a.hardware, &y = b.hardware;
  if (x.packages != y.packages || x.numaNodes != y.numaNodes || x.cores != y.cores ||
      x.pus != y.pus || !sameDevices(x.gpus, y.gpus) || !sameDevices(x.nics, y.nics)) {
    return false;
  }
  if (a.transports.size() != b.transports.size()) return false;
  for (size_t i = 0; i < a.transports.size(); ++i) {
    const UcxTransport &s = a.transports[i], &t = b.transports[i];
    if (s.name != t.name || s.linkClass != t.linkClass ||
        !sameLink({s.latencySeconds, s.bytesPerSecond}, {t.latencySeconds, t.bytesPerSecond})) {
      return false;
    }
  }
  if (a.hasIntraLink != b.hasIntraLink || a.hasInterLink != b.hasInterLink) return false;
  if (a.hasIntraLink && !sameLink(a.intraLink, b.intraLink)) return false;
  if (a.hasInterLink && !sameLink(a.interLink, b.interLink)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Topology topology;
  std::string why;
  if (!parseTopology(text, &topology, &why)) {
    GFSHIM_FUZZ_CHECK(!why.empty(), "rejected without a reason");
    return 0;
  }
  const std::string dumped = formatTopology(topology);
  Topology again;
  GFSHIM_FUZZ_CHECK(parseTopology(dumped, &again, &why),
                    "the dump of an accepted file does not parse: %s\n--- dump:\n%s", why.c_str(),
                    dumped.c_str());
  GFSHIM_FUZZ_CHECK(sameTopology(topology, again),
                    "the dump parses to a different topology\n--- dump:\n%s--- dump of that:\n%s",
                    dumped.c_str(), formatTopology(again).c_str());

  resolveLinkCosts(LinkOverrides{}, &topology);
  GFSHIM_FUZZ_CHECK(topology.hasIntraLink && topology.hasInterLink, "link costs unresolved");
  GFSHIM_FUZZ_CHECK(!describeTopology(topology).empty(), "empty description");
  return 0;
}
