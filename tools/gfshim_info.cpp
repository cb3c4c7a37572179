// gfshim-info: what this build of libgfshim can do and how it is configured.
//
//   gfshim-info                    version, build features, the topology (hwloc, UCX, or
//                                  GFSHIM_TOPO_FILE), what GFSHIM_ALGO=auto would choose per
//                                  message size, and every parameter with its value, where the
//                                  value came from, its default and its doc. Under mpirun (or
//                                  mpiexec) it detects the topology collectively, exactly as the
//                                  shim does, and rank 0 prints the agreed multi-rank view.
//   gfshim-info --params-markdown  the parameter table of docs/parameters.md, from params.def
//   gfshim-info --help             a short usage text
//   gfshim-info --model --ranks-per-node X --nodes Y --bytes N [--inter-gbps G]
//               [--inter-latency-us L] [--intra-gbps G] [--intra-latency-us L]
//               [--ranks-per-cpu C] [--reduce-gbps R] [--rendezvous-us H]
//                                  predicted time and latency steps of ring, 2D torus and
//                                  recursive doubling (src/engine/cost_model.h), and the
//                                  fusion thresholds it implies; R: the reduction's rate
//                                  (default 80 Gbit/s, as GFSHIM_REDUCE_GBPS; a huge one leaves
//                                  it out, as a simulation without computation does); H: what a
//                                  rendezvous message costs more (default 6 us, as
//                                  GFSHIM_RENDEZVOUS_US; 0 for SimGrid, which models no handshake);
//                                  C: ranks a CPU runs (above 1 every step waits longer)
//
// It reads the same environment and GFSHIM_CONFIG file as the shim, so it also shows what a bad
// value would fall back to.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "algo/reducer.h"
#include "compress/half_codec.h"
#include "config/config.h"
#include "engine/cost_model.h"
#include "engine/policy.h"
#include "engine/stats.h"
#include "gpu/gpu_plugin.h"
#include "mpi/detect.h"
#include "topo/local_topology.h"
#include "version.h"

namespace {

using gfshim::Config;
using gfshim::Param;
using gfshim::ParamSpec;

std::string acceptedText(const ParamSpec& spec) {
  switch (spec.type) {
    case gfshim::ParamType::kBool:
      return "0 or 1";
    case gfshim::ParamType::kSize: {
      std::string range = spec.accepted;
      return "bytes, " + range.replace(range.find(".."), 2, " to ");
    }
    case gfshim::ParamType::kCount: {
      std::string range = spec.accepted;
      return "whole number, " + range.replace(range.find(".."), 2, " to ");
    }
    case gfshim::ParamType::kDecimal: {
      std::string range = spec.accepted;
      return "number, " + range.replace(range.find(".."), 2, " to ");
    }
    case gfshim::ParamType::kEnum: {
      std::string choices = spec.accepted;
      for (char& c : choices) c = c == '|' ? ',' : c;
      return "one of " + choices;
    }
    case gfshim::ParamType::kList: {
      std::string choices = spec.accepted;
      for (char& c : choices) c = c == '|' ? ',' : c;
      return "list of ALL," + choices + " (^X excludes)";
    }
    case gfshim::ParamType::kGrid:
      return "XxY (positive integers)";
    case gfshim::ParamType::kPath:
      return "file path";
  }
  return "";
}

void printMarkdown() {
  std::printf("| Variable | Default | Accepts | Scope | Description |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int i = 0; i < gfshim::kParamCount; ++i) {
    const ParamSpec& spec = gfshim::paramSpec(static_cast<Param>(i));
    std::printf("| `%s` | `%s` | %s | %s | %s |\n", spec.name,
                *spec.defaultText ? spec.defaultText : "(unset)", acceptedText(spec).c_str(),
                spec.scope == gfshim::ParamScope::kPlan ? "all ranks" : "per rank", spec.doc);
  }
}

// What GPU buffers would get in this process: NCCL through the plugin on GPU 0, or staging.
void printGpuPath() {
  std::string why;
  if (gfshim::GpuPlugin::load(&why) == nullptr) {
    std::printf("GPU buffers : staged through host memory (%s)\n", why.c_str());
    return;
  }
  if (!gfshim::GpuPlugin::usableOn(0, &why)) {
    std::printf("GPU buffers : staged through host memory (GPU plugin loaded; NCCL on GPU 0: %s)\n",
                why.c_str());
    return;
  }
  std::printf(
      "GPU buffers : NCCL on GPU 0 through the GPU plugin (one GPU per rank), else staged\n");
}

void printFeatures() {
  std::printf("libgfshim %s\n", gfshim::kGfshimVersion);
  std::printf("built for   : %s\n", gfshim::kBuiltForMpi);
  std::printf(
      "features    : CUDA %s, NCCL %s, hwloc %s, UCX %s (at build time; every one of them is\n"
      "              loaded at run time only, so the shim runs where none is installed)\n",
      gfshim::kHaveCuda ? "yes" : "no", gfshim::kHaveNccl ? "yes" : "no",
      gfshim::kHaveHwloc ? "yes" : "no", gfshim::kHaveUcx ? "yes" : "no");
  std::printf("fp16/bf16   : %s conversion on this CPU\n", gfshim::halfCodecImplementation());
  std::printf("reduction   : %s kernels on this CPU\n", gfshim::reduceImplementation());
  printGpuPath();
}

void printTopology(const gfshim::Topology& topology, const std::string& hardwareSource,
                   const std::string& transportSource) {
  std::printf("\ntopology    : %s\n", gfshim::describeTopology(topology).c_str());
  std::printf("hardware    : %s\n", hardwareSource.c_str());
  for (const gfshim::PciDevice& gpu : topology.hardware.gpus) {
    std::printf("  gpu %-10s pci %s numa %d\n", gpu.name.c_str(), gpu.pciBus.c_str(), gpu.numaNode);
  }
  for (const gfshim::PciDevice& nic : topology.hardware.nics) {
    std::printf("  nic %-10s pci %s numa %d\n", nic.name.c_str(), nic.pciBus.c_str(), nic.numaNode);
  }
  std::printf("transports  : %s\n", transportSource.c_str());
  for (const gfshim::UcxTransport& transport : topology.transports) {
    std::printf("  %-20s %s-node %10.2f Gbit/s %8.2f us\n", transport.name.c_str(),
                transport.linkClass == gfshim::LinkClass::kIntraNode ? "intra" : "inter",
                transport.bytesPerSecond * 8 / 1e9, transport.latencySeconds * 1e6);
  }
}

// What the policy would do with a float SUM of each size on a communicator of `size` ranks
// with this topology: the same functions the shim calls, on a described call.
void printDecisions(const gfshim::Topology& topology, int size, const gfshim::Settings& settings) {
  gfshim::CommFacts facts;
  facts.size = size;
  facts.nodes = topology.nodes;
  facts.ranksPerNode = topology.ranksPerNode;
  facts.intraLink = topology.intraLink;
  facts.interLink = topology.interLink;
  std::printf("\nallreduce of float SUM on %d ranks (GFSHIM_ALGO=%s):\n", size,
              gfshim::Config::load(gfshim::configInputsFromProcess()).text(Param::ALGO).c_str());
  std::printf("%10s  %-58s %s\n", "bytes", "path", "predicted");
  for (uint64_t bytes = 64 << 10; bytes <= (1ull << 30); bytes *= 4) {
    gfshim::CallInfo call;
    call.count = static_cast<int64_t>(bytes / sizeof(float));
    call.dtype = gfshim::DType::kFloat32;
    call.op = gfshim::RedOp::kSum;
    call.inPlace = true;
    call.recvAddress = 1;  // any non-null address: the described call is not erroneous
    gfshim::Plan plan = gfshim::planCall(call, settings);
    plan = gfshim::planOnComm(plan, facts);
    plan = gfshim::chooseAlgorithm(plan, facts, settings, *call.dtype, *call.op, bytes);
    std::string path = std::string(plan.route == gfshim::Route::kEngine ? "" : "pass through: ") +
                       gfshim::reasonText(plan.reason);
    if (plan.lossy.any()) {
      path += std::string(" + ") + gfshim::lossyModeName(gfshim::lossyModeIndex(plan.lossy));
    }
    std::printf("%10llu  %-58s %s\n", static_cast<unsigned long long>(bytes), path.c_str(),
                gfshim::formatEstimate(plan.estimate).c_str());
  }
}

void printParameters(const Config& config) {
  std::printf("\n%-24s %-10s %-8s %-10s %s\n", "parameter", "value", "source", "default", "doc");
  for (int i = 0; i < gfshim::kParamCount; ++i) {
    const ParamSpec& spec = gfshim::paramSpec(static_cast<Param>(i));
    const gfshim::ParamValue& value = config.value(static_cast<Param>(i));
    std::printf("%-24s %-10s %-8s %-10s %s\n", spec.name,
                value.text.empty() ? "-" : value.text.c_str(),
                gfshim::valueSourceName(value.source), *spec.defaultText ? spec.defaultText : "-",
                spec.doc);
  }
  if (!config.diagnostics().empty()) {
    std::printf("\nproblems:\n");
    for (const std::string& problem : config.diagnostics()) std::printf("  %s\n", problem.c_str());
  }
}

gfshim::Settings loadSettings(const Config& config) {
  gfshim::Settings settings = gfshim::settingsFrom(config);
  gfshim::setLogFilter(settings.log);
  return settings;
}

// One process: the local probes (or the file); its layout is the file's, else one rank.
int printSingleProcessReport() {
  const Config config = Config::load(gfshim::configInputsFromProcess());
  const gfshim::Settings settings = loadSettings(config);
  printFeatures();
  gfshim::LocalTopology local = gfshim::loadLocalTopology(settings);
  gfshim::Topology& topology = local.topology;
  if (!local.layoutFromFile) {
    topology.nodes = 1;
    topology.ranksPerNode = 1;
  }
  gfshim::resolveLinkCosts(
      {settings.intraGbps, settings.intraLatencyUs, settings.interGbps, settings.interLatencyUs},
      &topology);
  printTopology(topology, local.hardwareSource, local.transportSource);
  if (!settings.topoDump.empty()) {
    std::ofstream dump(settings.topoDump);
    dump << gfshim::formatTopology(topology);
    std::printf("topology written to %s%s\n", settings.topoDump.c_str(),
                dump ? "" : " FAILED: cannot write there");
  }
  const int size = topology.nodes * topology.ranksPerNode;
  if (size > 1) {
    printDecisions(topology, size, settings);
  } else {
    std::printf(
        "\n(one rank: run under mpirun, or give GFSHIM_TOPO_FILE a layout, to see what\n"
        " GFSHIM_ALGO=auto chooses per message size)\n");
  }
  printParameters(config);
  return 0;
}

// Under a launcher: the collective detection the shim runs at a communicator's setup, on
// MPI_COMM_WORLD; rank 0 prints the agreed view.
int printMultiRankReport(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const Config config = Config::load(gfshim::configInputsFromProcess());
  const gfshim::Settings settings = loadSettings(config);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gfshim::CommTopology detected;
  const gfshim::Status status = gfshim::detectTopology(MPI_COMM_WORLD, settings, &detected);
  if (!status.isOk()) {
    std::fprintf(stderr, "gfshim-info: rank %d: topology detection failed: %s\n", rank,
                 status.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printFeatures();
    std::printf("ranks       : %d; node of each rank:", size);
    for (int node : detected.nodeOfRank) std::printf(" %d", node);
    std::printf("\nhardware    : %s across nodes\n",
                detected.hardwareUniform ? "identical" : "DIFFERENT");
    printTopology(detected.topology, detected.hardwareSource + " (rank 0's view)",
                  detected.transportSource + " (rank 0's list; link costs agreed over ranks)");
    printDecisions(detected.topology, size, settings);
    printParameters(config);
  }
  MPI_Finalize();
  return 0;
}

bool launchedByMpirun() {
  for (const char* variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

constexpr const char* kUsage =
    "usage: gfshim-info [--params-markdown | --model --ranks-per-node X --nodes Y --bytes N\n"
    "                   [--inter-gbps G] [--inter-latency-us L] [--intra-gbps G] "
    "[--intra-latency-us L]\n"
    "                   [--ranks-per-cpu C] [--reduce-gbps R] [--rendezvous-us H]]\n";

// --help: the modes above, in short, then kUsage.
constexpr const char* kHelp =
    "gfshim-info: what this build of libgfshim can do and how it is configured\n"
    "\n"
    "  gfshim-info                    version, build features, topology, what GFSHIM_ALGO=auto\n"
    "                                 chooses per message size, and every parameter with its\n"
    "                                 value and origin; under mpirun/mpiexec the view the ranks\n"
    "                                 agree on, printed by rank 0\n"
    "  gfshim-info --params-markdown  the table of docs/parameters.md (from params.def)\n"
    "  gfshim-info --model ...        predicted time and latency steps of ring, 2D torus,\n"
    "                                 hierarchical and recursive doubling for a cluster shape;\n"
    "                                 defaults: 64M bytes, 10 Gbit/s 5 us between nodes,\n"
    "                                 100 Gbit/s 1 us inside one, reduction 80 Gbit/s,\n"
    "                                 rendezvous 6 us\n"
    "  gfshim-info --help             this text\n"
    "\n"
    "It reads the same GFSHIM_* environment and GFSHIM_CONFIG file as the shim.\n"
    "\n";

int printModel(int argc, char** argv) {
  gfshim::ClusterShape shape;
  shape.interNode = {5e-6, 10e9 / 8};   // 10 Gbit/s, 5 us
  shape.intraNode = {1e-6, 100e9 / 8};  // 100 Gbit/s, 1 us
  uint64_t bytes = 64ull << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    const bool numeric = end != value.c_str() && *end == '\0' && number > 0;
    const bool nonNegative = end != value.c_str() && *end == '\0' && number >= 0;
    std::string why;
    if (flag == "--bytes") {
      if (!gfshim::parseByteCount(value, &bytes, &why) || bytes == 0) {
        std::fprintf(stderr, "gfshim-info: --bytes '%s': %s\n", value.c_str(), why.c_str());
        return 2;
      }
    } else if (flag == "--rendezvous-us") {
      if (!nonNegative) {
        std::fprintf(stderr, "gfshim-info: --rendezvous-us needs a number of 0 or more, not '%s'\n%s",
                     value.c_str(), kUsage);
        return 2;
      }
      shape.rendezvousSeconds = number * 1e-6;
    } else if (!numeric) {
      std::fprintf(stderr, "gfshim-info: %s needs a positive number, not '%s'\n%s", flag.c_str(),
                   value.c_str(), kUsage);
      return 2;
    } else if (flag == "--ranks-per-node") {
      shape.ranksPerNode = static_cast<int64_t>(number);
    } else if (flag == "--nodes") {
      shape.nodes = static_cast<int64_t>(number);
    } else if (flag == "--inter-gbps") {
      shape.interNode.bytesPerSecond = number * 1e9 / 8;
    } else if (flag == "--inter-latency-us") {
      shape.interNode.latencySeconds = number * 1e-6;
    } else if (flag == "--intra-gbps") {
      shape.intraNode.bytesPerSecond = number * 1e9 / 8;
    } else if (flag == "--intra-latency-us") {
      shape.intraNode.latencySeconds = number * 1e-6;
    } else if (flag == "--ranks-per-cpu") {
      shape.ranksPerCpu = number;
    } else if (flag == "--reduce-gbps") {
      shape.reduceBytesPerSecond = number * 1e9 / 8;
    } else {
      std::fprintf(stderr, "gfshim-info: unknown option %s\n%s", flag.c_str(), kUsage);
      return 2;
    }
  }
  if (argc % 2 != 0) {
    std::fprintf(stderr, "gfshim-info: option without a value\n%s", kUsage);
    return 2;
  }
  const double n = static_cast<double>(bytes);
  std::printf(
      "%lld ranks = %lld nodes x %lld ranks per node, %llu bytes; links: between nodes "
      "%.1f Gbit/s %.1f us, inside a node %.1f Gbit/s %.1f us; reduction %.3g Gbit/s; "
      "rendezvous %.1f us\n",
      static_cast<long long>(shape.nodes * shape.ranksPerNode), static_cast<long long>(shape.nodes),
      static_cast<long long>(shape.ranksPerNode), static_cast<unsigned long long>(bytes),
      shape.interNode.bytesPerSecond * 8 / 1e9, shape.interNode.latencySeconds * 1e6,
      shape.intraNode.bytesPerSecond * 8 / 1e9, shape.intraNode.latencySeconds * 1e6,
      shape.reduceBytesPerSecond * 8 / 1e9, shape.rendezvousSeconds * 1e6);
  if (shape.ranksPerCpu > 1) {
    std::printf("oversubscribed, %.2g ranks a CPU: every latency step costs %.0f us more\n",
                shape.ranksPerCpu, gfshim::oversubscribedStepSeconds(shape) * 1e6);
  }
  std::printf("%-34s %14s %14s\n", "algorithm", "latency steps", "predicted (s)");
  auto piecesText = [](int64_t count) {
    return std::to_string(count) + (count == 1 ? " piece" : " pieces");
  };
  const gfshim::Settings settings =
      gfshim::settingsFrom(Config::load(gfshim::configInputsFromProcess()));
  // The hierarchical chains cut a piece into segments of GFSHIM_SEGMENT_BYTES.
  const double segmentBytes = static_cast<double>(settings.segmentBytes);
  const int64_t leaderPieces = gfshim::bestHierarchicalPieces(shape, n, segmentBytes);
  // The torus unpipelined with ring columns (Mikami et al.'s), then per column pass the pieces
  // the torus takes (GFSHIM_TORUS_PIECES or the model's); GFSHIM_TORUS_COLUMN=auto takes the
  // faster of ring and halving columns (split columns, printed where the node count is neither
  // odd nor a power of two, only when asked for).
  std::vector<std::pair<std::string, gfshim::AlgorithmCost>> rows = {
      {"ring", gfshim::ringCost(shape, n)},
      {"torus2d, 1 piece, ring columns", gfshim::torusCost(shape, n)}};
  const gfshim::ColumnSplit split = gfshim::columnSplit(static_cast<int>(shape.nodes));
  const std::pair<gfshim::TorusColumn, const char*> columns[] = {
      {gfshim::TorusColumn::kRing, "ring columns"},
      {gfshim::TorusColumn::kHalvingDoubling, "halving columns"},
      {gfshim::TorusColumn::kRingThenHalving, "split columns"}};
  for (const auto& [column, columnText] : columns) {
    const int64_t pieces = settings.torusPieces > 0 ? static_cast<int64_t>(settings.torusPieces)
                                                    : gfshim::bestTorusPieces(shape, n, column);
    if (pieces == 1 && column == gfshim::TorusColumn::kRing) continue;  // the row above
    if (column == gfshim::TorusColumn::kRingThenHalving &&
        (split.ringNodes == 1 || split.halvingNodes == 1)) {
      continue;  // one of the two above
    }
    rows.push_back({"torus2d, " + piecesText(pieces) + ", " + columnText,
                    gfshim::torusCost(shape, n, pieces, column)});
  }
  rows.push_back({"hierarchical, " + piecesText(leaderPieces),
                  gfshim::hierarchicalCost(shape, n, segmentBytes, leaderPieces)});
  rows.push_back({"recursive doubling", gfshim::recursiveDoublingCost(shape, n)});
  for (const auto& [name, cost] : rows) {
    std::printf("%-34s %14lld %14.6f\n", name.c_str(), static_cast<long long>(cost.latencySteps),
                cost.seconds);
  }
  const uint64_t aloneNative = gfshim::fusedAloneBeatsNativeBytes(shape);
  std::printf(
      "fusion: operations of at least %llu bytes are reduced alone; an MPI_Iallreduce "
      "found alone is fused from %s bytes (below: the MPI's own, where it may run)\n",
      static_cast<unsigned long long>(gfshim::fusionAloneBytes(shape)),
      aloneNative == UINT64_MAX ? "never" : std::to_string(aloneNative).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s%s", kHelp, kUsage);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--params-markdown") == 0) {
    printMarkdown();
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--model") == 0) return printModel(argc, argv);
  if (argc > 1) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  return launchedByMpirun() ? printMultiRankReport(argc, argv) : printSingleProcessReport();
}
