// gfshim-info: what this build of libgfshim can do and how it is configured.
//
//   gfshim-info                    version, build features, every parameter with its value,
//                                  where the value came from, its default and its doc
//   gfshim-info --params-markdown  the README's parameter table, generated from params.def
//   gfshim-info --model --ranks-per-node X --nodes Y --bytes N [--inter-gbps G]
//               [--inter-latency-us L] [--intra-gbps G] [--intra-latency-us L]
//                                  predicted time and latency steps of ring, 2D torus and
//                                  recursive doubling (src/engine/cost_model.h)
//
// It reads the same environment and GFSHIM_CONFIG file as the shim, so it also shows what a bad
// value would fall back to.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "config/config.h"
#include "engine/cost_model.h"
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

void printReport() {
  std::printf("libgfshim %s\n", gfshim::kGfshimVersion);
  std::printf("built for   : %s\n", gfshim::kBuiltForMpi);
  std::printf(
      "features    : CUDA %s, NCCL %s, hwloc %s, UCX %s (detected at build time; "
      "this version uses none of them yet)\n",
      gfshim::kHaveCuda ? "yes" : "no", gfshim::kHaveNccl ? "yes" : "no",
      gfshim::kHaveHwloc ? "yes" : "no", gfshim::kHaveUcx ? "yes" : "no");
  const Config config = Config::load(gfshim::configInputsFromProcess());
  std::printf("\n%-22s %-10s %-8s %-10s %s\n", "parameter", "value", "source", "default", "doc");
  for (int i = 0; i < gfshim::kParamCount; ++i) {
    const ParamSpec& spec = gfshim::paramSpec(static_cast<Param>(i));
    const gfshim::ParamValue& value = config.value(static_cast<Param>(i));
    std::printf("%-22s %-10s %-8s %-10s %s\n", spec.name,
                value.text.empty() ? "-" : value.text.c_str(),
                gfshim::valueSourceName(value.source), *spec.defaultText ? spec.defaultText : "-",
                spec.doc);
  }
  if (!config.diagnostics().empty()) {
    std::printf("\nproblems:\n");
    for (const std::string& problem : config.diagnostics()) std::printf("  %s\n", problem.c_str());
  }
}

constexpr const char* kUsage =
    "usage: gfshim-info [--params-markdown | --model --ranks-per-node X --nodes Y --bytes N\n"
    "                   [--inter-gbps G] [--inter-latency-us L] [--intra-gbps G] "
    "[--intra-latency-us L]]\n";

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
    std::string why;
    if (flag == "--bytes") {
      if (!gfshim::parseByteCount(value, &bytes, &why) || bytes == 0) {
        std::fprintf(stderr, "gfshim-info: --bytes '%s': %s\n", value.c_str(), why.c_str());
        return 2;
      }
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
      "%.1f Gbit/s %.1f us, inside a node %.1f Gbit/s %.1f us\n",
      static_cast<long long>(shape.nodes * shape.ranksPerNode), static_cast<long long>(shape.nodes),
      static_cast<long long>(shape.ranksPerNode), static_cast<unsigned long long>(bytes),
      shape.interNode.bytesPerSecond * 8 / 1e9, shape.interNode.latencySeconds * 1e6,
      shape.intraNode.bytesPerSecond * 8 / 1e9, shape.intraNode.latencySeconds * 1e6);
  std::printf("%-20s %14s %14s\n", "algorithm", "latency steps", "predicted (s)");
  const std::pair<const char*, gfshim::AlgorithmCost> rows[] = {
      {"ring", gfshim::ringCost(shape, n)},
      {"torus2d", gfshim::torusCost(shape, n)},
      {"recursive doubling", gfshim::recursiveDoublingCost(shape, n)}};
  for (const auto& [name, cost] : rows) {
    std::printf("%-20s %14lld %14.6f\n", name, static_cast<long long>(cost.latencySteps),
                cost.seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--params-markdown") == 0) {
    printMarkdown();
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--model") == 0) return printModel(argc, argv);
  if (argc > 1) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  printReport();
  return 0;
}
