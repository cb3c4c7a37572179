#include "topo/topology.h"

#include <gtest/gtest.h>

#include <string>

#include "topo/hardware_probe.h"
#include "version.h"

namespace gfshim {
namespace {

constexpr const char* kBigCluster = R"(# 64 nodes of 8 GPUs
nodes = 64
ranks_per_node = 8
packages = 2
numa_nodes = 2
cores = 64
pus = 128
gpu = cuda0 pci=0000:07:00.0 numa=0
gpu = cuda1 pci=0000:87:00.0 numa=1
nic = mlx5_0 pci=0000:0c:00.0 numa=0   # first rail
transport = rc_mlx5/mlx5_0:1 class=inter gbps=200 latency_us=1.5
transport = posix/memory class=intra gbps=100 latency_us=0.1
)";

Topology parsed(const std::string& text) {
  Topology topology;
  std::string why;
  EXPECT_TRUE(parseTopology(text, &topology, &why)) << why;
  return topology;
}

std::string parseError(const std::string& text) {
  Topology topology;
  topology.nodes = 99;
  std::string why;
  EXPECT_FALSE(parseTopology(text, &topology, &why)) << text;
  EXPECT_EQ(topology.nodes, 99) << "a failed parse must leave the value alone";
  return why;
}

TEST(TopologyFile, ParsesEveryKey) {
  const Topology t = parsed(kBigCluster);
  EXPECT_EQ(t.nodes, 64);
  EXPECT_EQ(t.ranksPerNode, 8);
  EXPECT_EQ(t.hardware.packages, 2);
  EXPECT_EQ(t.hardware.numaNodes, 2);
  EXPECT_EQ(t.hardware.cores, 64);
  EXPECT_EQ(t.hardware.pus, 128);
  ASSERT_EQ(t.hardware.gpus.size(), 2u);
  EXPECT_EQ(t.hardware.gpus[1].name, "cuda1");
  EXPECT_EQ(t.hardware.gpus[1].pciBus, "0000:87:00.0");
  EXPECT_EQ(t.hardware.gpus[1].numaNode, 1);
  ASSERT_EQ(t.hardware.nics.size(), 1u);
  EXPECT_EQ(t.hardware.nics[0].name, "mlx5_0");
  ASSERT_EQ(t.transports.size(), 2u);
  EXPECT_EQ(t.transports[0].linkClass, LinkClass::kInterNode);
  EXPECT_DOUBLE_EQ(t.transports[0].bytesPerSecond, 25e9);
  EXPECT_DOUBLE_EQ(t.transports[0].latencySeconds, 1.5e-6);
  EXPECT_FALSE(t.hasInterLink);
  EXPECT_TRUE(parsed("").transports.empty());
}

TEST(TopologyFile, FormatParsesBackToTheSameValue) {
  Topology t = parsed(kBigCluster);
  resolveLinkCosts({}, &t);
  const std::string text = formatTopology(t);
  const Topology again = parsed(text);
  EXPECT_EQ(formatTopology(again), text);
  EXPECT_TRUE(again.hasIntraLink);
  EXPECT_DOUBLE_EQ(again.interLink.bytesPerSecond, 25e9);
}

TEST(TopologyFile, BadFilesSayWhichLineAndWhat) {
  EXPECT_EQ(parseError("nodes = 2\n"), "nodes and ranks_per_node must be given together");
  EXPECT_EQ(parseError("cores = 4\nnodes = 0\nranks_per_node = 2\n"),
            "line 2: nodes must be a positive integer, not '0'");
  EXPECT_EQ(parseError("\n# comment\ncores = many\n"),
            "line 3: cores must be a positive integer, not 'many'");
  EXPECT_EQ(parseError("sockets = 2\n").rfind("line 1: unknown key 'sockets' (known: nodes,", 0),
            0u);
  EXPECT_EQ(parseError("just words\n"), "line 1: 'just words' is not of the form key = value");
  EXPECT_EQ(parseError("gpu = cuda0 numa=0\n"), "line 1: 'pci=' is missing");
  EXPECT_EQ(parseError("gpu = cuda0 pci=1 numa=x\n"),
            "line 1: numa must be a NUMA node index or -1, not 'x'");
  EXPECT_EQ(parseError("gpu =\n"), "line 1: a name is missing");
  EXPECT_EQ(parseError("nic = eth0 pci=1 numa=0 speed=10\n"), "line 1: unexpected 'speed=10'");
  EXPECT_EQ(parseError("transport = tcp/eth0 class=wan gbps=1 latency_us=1\n"),
            "line 1: class must be intra or inter, not 'wan'");
  EXPECT_EQ(parseError("inter_link = gbps=0 latency_us=1\n"),
            "line 1: gbps must be a positive number, not '0'");
  EXPECT_EQ(parseError("inter_link = gbps=1 latency_us=-2\n"),
            "line 1: latency_us must be a number >= 0, not '-2'");
  EXPECT_EQ(parseError("inter_link = gbps=1 gbps=2 latency_us=1\n"), "line 1: unexpected 'gbps=2'");
  EXPECT_EQ(parseError("ranks_per_node = 99999999999\nnodes = 1\n"),
            "line 1: ranks_per_node must be a positive integer, not '99999999999'");
}

TEST(LinkCosts, ParametersBeatTheFileWhichBeatsUcxWhichBeatsDefaults) {
  Topology none;
  resolveLinkCosts({}, &none);
  EXPECT_EQ(none.interLinkSource, "default");
  EXPECT_DOUBLE_EQ(none.interLink.bytesPerSecond, kDefaultInterGbps * 1e9 / 8);
  EXPECT_DOUBLE_EQ(none.intraLink.latencySeconds, kDefaultIntraLatencyUs * 1e-6);

  // The best transport of each class; loopback is no link between nodes.
  Topology ucx = parsed(
      "transport = tcp/lo class=inter gbps=400 latency_us=1\n"
      "transport = tcp/eth0 class=inter gbps=10 latency_us=30\n"
      "transport = rc/mlx5_0:1 class=inter gbps=100 latency_us=2\n"
      "transport = sysv/memory class=intra gbps=80 latency_us=0.2\n");
  resolveLinkCosts({}, &ucx);
  EXPECT_EQ(ucx.interLinkSource, "UCX rc/mlx5_0:1");
  EXPECT_DOUBLE_EQ(ucx.interLink.latencySeconds, 2e-6);
  EXPECT_EQ(ucx.intraLinkSource, "UCX sysv/memory");

  Topology file = parsed(
      "inter_link = gbps=8 latency_us=50\n"
      "transport = rc/mlx5_0:1 class=inter gbps=100 latency_us=2\n");
  resolveLinkCosts({}, &file);
  EXPECT_EQ(file.interLinkSource, "topology file");
  EXPECT_DOUBLE_EQ(file.interLink.bytesPerSecond, 1e9);

  LinkOverrides overrides;
  overrides.interGbps = 1;
  resolveLinkCosts(overrides, &file);
  EXPECT_EQ(file.interLinkSource, "topology file + parameters");
  EXPECT_DOUBLE_EQ(file.interLink.bytesPerSecond, 1e9 / 8);
  EXPECT_DOUBLE_EQ(file.interLink.latencySeconds, 50e-6);
}

// A build with the headers runs on a machine with the libraries (both MPIs depend on hwloc; the
// test dependencies install UCX): the probes must succeed with a plausible description. A build
// without them must say why.
TEST(HardwareProbes, DescribeThisMachineOrSayWhyNot) {
  NodeHardware hardware;
  const Status hwloc = probeHwloc(&hardware);
  EXPECT_EQ(hwloc.isOk(), kHaveHwloc) << hwloc.message();
  if (hwloc.isOk()) {
    EXPECT_GE(hardware.packages, 1);
    EXPECT_GE(hardware.cores, 1);
    EXPECT_GE(hardware.pus, hardware.cores);
    EXPECT_GE(hardware.numaNodes, 1);
  } else {
    EXPECT_FALSE(hwloc.message().empty());
  }
  std::vector<UcxTransport> transports;
  const Status ucx = probeUcx(&transports);
  EXPECT_EQ(ucx.isOk(), kHaveUcx) << ucx.message();
  if (ucx.isOk()) {
    ASSERT_FALSE(transports.empty());
    for (const UcxTransport& transport : transports) {
      EXPECT_NE(transport.name.find('/'), std::string::npos) << transport.name;
      EXPECT_GT(transport.bytesPerSecond, 0) << transport.name;
    }
  } else {
    EXPECT_FALSE(ucx.message().empty());
  }
}

// Found by tests/fuzz/topology_fuzzer.cpp: formatTopology wrote the four hardware counts only
// when packages was set, and then all four, so "cores = 4" alone was dropped from a dump and
// "packages = 2" alone was dumped with "numa_nodes = 0", which the parser rejects.
TEST(TopologyFile, PartialHardwareCountsSurviveTheDump) {
  const Topology cores = parsed("cores = 4\r\npus = 8\r\n");
  const Topology coresAgain = parsed(formatTopology(cores));
  EXPECT_EQ(coresAgain.hardware.cores, 4);
  EXPECT_EQ(coresAgain.hardware.pus, 8);
  EXPECT_EQ(coresAgain.hardware.packages, 0);
  const Topology packages = parsed("packages = 2\n");
  const Topology packagesAgain = parsed(formatTopology(packages));
  EXPECT_EQ(packagesAgain.hardware.packages, 2);
  EXPECT_EQ(packagesAgain.hardware.numaNodes, 0);
  EXPECT_EQ(formatTopology(packagesAgain), formatTopology(packages));
}

// Found by tests/fuzz/topology_fuzzer.cpp: a figure just below the limit 1e12 was dumped with 6
// digits as "1e+12", which the parser rejected (the limit was exclusive).
TEST(TopologyFile, FiguresAtTheLimitSurviveTheDump) {
  const Topology t = parsed(
      "transport = tcp/eth0 class=inter gbps=999999999999.9 latency_us=999999999999\n"
      "inter_link = gbps=1e12 latency_us=999999999999.9\n");
  const std::string text = formatTopology(t);
  EXPECT_NE(text.find("latency_us=1e+12"), std::string::npos) << text;
  const Topology again = parsed(text);
  EXPECT_EQ(formatTopology(again), text);
  EXPECT_EQ(parseError("inter_link = gbps=1.0000001e12 latency_us=1\n"),
            "line 1: gbps must be a positive number, not '1.0000001e12'");
}

}  // namespace
}  // namespace gfshim
