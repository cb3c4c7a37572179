// gfshim-info: what this build of libgfshim can do and how it is configured.
//
//   gfshim-info                    version, build features, every parameter with its value,
//                                  where the value came from, its default and its doc
//   gfshim-info --params-markdown  the README's parameter table, generated from params.def
//
// It reads the same environment and GFSHIM_CONFIG file as the shim, so it also shows what a bad
// value would fall back to.
#include <cstdio>
#include <cstring>
#include <string>

#include "config/config.h"
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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--params-markdown") == 0) {
    printMarkdown();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: gfshim-info [--params-markdown]\n");
    return 2;
  }
  printReport();
  return 0;
}
