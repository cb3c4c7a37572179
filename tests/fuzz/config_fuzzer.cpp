// libFuzzer target for the GFSHIM_* parser: Config::load, the function the init hook runs,
// with its environment and its GFSHIM_CONFIG file given from memory (ConfigInputs).
//
// Input: the config file text; after the first NUL byte, one environment entry NAME=value per
// line (GFSHIM_CONFIG=fuzz.conf is always set first, so the file is always read).
//
// Properties beyond "no crash, no sanitizer report":
//   - every diagnostic is a non-empty sentence;
//   - every value's canonical text (what the plan hash covers and gfshim-info prints) parses
//     back to the same text and the same number, and a decimal to the same double, so ranks
//     whose hashes agree use identical values.
#include <cstdint>
#include <string>

#include "config/config.h"
#include "fuzz_check.h"

using namespace gfshim;

namespace {

void addEnvironment(const std::string& lines, ConfigInputs* inputs) {
  size_t begin = 0;
  while (begin <= lines.size()) {
    size_t end = lines.find('\n', begin);
    if (end == std::string::npos) end = lines.size();
    const std::string entry = lines.substr(begin, end - begin);
    const size_t equals = entry.find('=');
    if (equals != std::string::npos) {
      inputs->environment.emplace_back(entry.substr(0, equals), entry.substr(equals + 1));
    }
    begin = end + 1;
  }
}

void checkCanonical(const Config& config) {
  for (int i = 0; i < kParamCount; ++i) {
    const Param param = static_cast<Param>(i);
    const ParamSpec& spec = paramSpec(param);
    const ParamValue& value = config.value(param);
    if (value.text.empty()) continue;  // unset (a Path or Grid without a default)
    ParamValue again;
    std::string why;
    GFSHIM_FUZZ_CHECK(parseParamValue(spec, value.text, &again, &why),
                      "%s: canonical text '%s' does not parse: %s", spec.name, value.text.c_str(),
                      why.c_str());
    GFSHIM_FUZZ_CHECK(again.text == value.text && again.number == value.number,
                      "%s: canonical text '%s' parses to '%s'", spec.name, value.text.c_str(),
                      again.text.c_str());
    GFSHIM_FUZZ_CHECK(again.decimal == value.decimal,
                      "%s: canonical text '%s' parses to %.17g, but the value in use is %.17g",
                      spec.name, value.text.c_str(), again.decimal, value.decimal);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t separator = input.find('\0');
  const std::string file = input.substr(0, separator);

  ConfigInputs inputs;
  inputs.environment.emplace_back("GFSHIM_CONFIG", "fuzz.conf");
  if (separator != std::string::npos) addEnvironment(input.substr(separator + 1), &inputs);
  inputs.readFile = [&file](const std::string&, std::string* contents) {
    *contents = file;
    return true;
  };

  const Config config = Config::load(inputs);
  for (const std::string& diagnostic : config.diagnostics()) {
    GFSHIM_FUZZ_CHECK(!diagnostic.empty(), "an empty diagnostic");
  }
  checkCanonical(config);
  const Settings settings = settingsFrom(config);
  GFSHIM_FUZZ_CHECK(settings.torusX >= 0 && settings.torusY >= 0, "torus %dx%d", settings.torusX,
                    settings.torusY);
  GFSHIM_FUZZ_CHECK(config.planHash() >= 0, "negative plan hash");
  GFSHIM_FUZZ_CHECK(!config.planSummary().empty(), "empty plan summary");
  return 0;
}
