#include "config/config.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <type_traits>

extern char** environ;

namespace gfshim {
namespace {

constexpr ParamType Bool = ParamType::kBool;
constexpr ParamType Size = ParamType::kSize;
constexpr ParamType Count = ParamType::kCount;
constexpr ParamType Enum = ParamType::kEnum;
constexpr ParamType List = ParamType::kList;
constexpr ParamType Grid = ParamType::kGrid;
constexpr ParamType Decimal = ParamType::kDecimal;
constexpr ParamType Path = ParamType::kPath;
constexpr ParamScope Plan = ParamScope::kPlan;
constexpr ParamScope Local = ParamScope::kLocal;

constexpr ParamSpec kSpecs[kParamCount] = {
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) \
  {"GFSHIM_" #NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, DOC},
#include "params.def"
#undef GFSHIM_PARAM
};

constexpr const char* kPrefix = "GFSHIM_";

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& s, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream stream(s);
  while (std::getline(stream, part, separator)) parts.push_back(trim(part));
  return parts;
}

// "MIN..MAX" as {MIN, MAX}; a bound may hold a decimal point (0..0.9999).
std::vector<std::string> rangeBounds(const std::string& accepted) {
  const size_t dots = accepted.find("..");
  if (dots == std::string::npos) return {trim(accepted)};
  return {trim(accepted.substr(0, dots)), trim(accepted.substr(dots + 2))};
}

std::string joinChoices(const char* accepted) {
  std::string out;
  for (const std::string& choice : split(accepted, '|')) {
    if (!out.empty()) out += ", ";
    out += choice;
  }
  return out;
}

bool parseBool(const std::string& text, uint64_t* out) {
  const std::string s = upper(trim(text));
  if (s == "1" || s == "TRUE" || s == "YES" || s == "ON") {
    *out = 1;
    return true;
  }
  if (s == "0" || s == "FALSE" || s == "NO" || s == "OFF") {
    *out = 0;
    return true;
  }
  return false;
}

std::string formatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

// The shortest "%g" spelling that reads back as exactly `value`: the canonical text is what the
// plan hash covers, so two values that differ only beyond the 6th digit must not share it.
std::string formatDecimal(double value) {
  char text[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// Levenshtein distance, for "did you mean" suggestions.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

int findParam(const std::string& fullName) {
  for (int i = 0; i < kParamCount; ++i) {
    if (fullName == kSpecs[i].name) return i;
  }
  return -1;
}

std::string unknownParamMessage(const std::string& fullName, const std::string& where) {
  std::string message = "unknown parameter " + fullName + where + " is ignored";
  const ParamSpec* closest = nullptr;
  size_t best = SIZE_MAX;
  for (const ParamSpec& spec : kSpecs) {
    // The distance is at least the difference in length: skip names that cannot be within 3,
    // so a long unknown name costs no quadratic work.
    const size_t length = std::strlen(spec.name);
    if (std::max(length, fullName.size()) - std::min(length, fullName.size()) > 3) continue;
    const size_t distance = editDistance(fullName, spec.name);
    if (distance < best) {
      best = distance;
      closest = &spec;
    }
  }
  if (closest != nullptr && best <= 3) {
    message += std::string(" (did you mean ") + closest->name + "?)";
  } else {
    message += " (gfshim-info lists every parameter)";
  }
  return message;
}

}  // namespace

// "256K" -> 262144. Digits, then an optional K/M/G/T (powers of 1024) with an optional B/iB, or a
// bare B. Rejects signs, fractions, blanks inside and overflow.
bool parseByteCount(const std::string& text, uint64_t* out, std::string* why) {
  const std::string s = upper(trim(text));
  if (!s.empty() && s[0] == '-') {
    *why = "a size cannot be negative";
    return false;
  }
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0) {
    *why = "expected a byte count such as 4096, 256K, 64M or 1G";
    return false;
  }
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t digit = static_cast<uint64_t>(s[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      *why = "the number is too large";
      return false;
    }
    value = value * 10 + digit;
  }
  const std::string suffix = s.substr(digits);
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else {
    static const char kUnits[] = "KMGT";
    const char* unit = std::strchr(kUnits, suffix[0]);
    const std::string rest = suffix.substr(1);
    if (unit == nullptr || !(rest.empty() || rest == "B" || rest == "IB")) {
      *why = "unknown unit '" + suffix + "' (accepted suffixes: K, M, G, T, powers of 1024)";
      return false;
    }
    shift = 10 * static_cast<int>(unit - kUnits + 1);
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    *why = "the number is too large";
    return false;
  }
  *out = value << shift;
  return true;
}

const ParamSpec& paramSpec(Param param) { return kSpecs[static_cast<int>(param)]; }

const char* paramTypeName(ParamType type) {
  switch (type) {
    case ParamType::kBool:
      return "bool";
    case ParamType::kSize:
      return "size";
    case ParamType::kCount:
      return "count";
    case ParamType::kDecimal:
      return "decimal";
    case ParamType::kEnum:
      return "enum";
    case ParamType::kList:
      return "list";
    case ParamType::kGrid:
      return "grid";
    case ParamType::kPath:
      return "path";
  }
  return "?";
}

const char* valueSourceName(ValueSource source) {
  switch (source) {
    case ValueSource::kDefault:
      return "default";
    case ValueSource::kFile:
      return "file";
    case ValueSource::kEnv:
      return "env";
  }
  return "?";
}

bool parseParamValue(const ParamSpec& spec, const std::string& text, ParamValue* out,
                     std::string* why) {
  switch (spec.type) {
    case ParamType::kBool:
      if (!parseBool(text, &out->number)) {
        *why = "accepted: 1, 0, true, false, yes, no, on, off";
        return false;
      }
      out->text = out->number != 0 ? "1" : "0";
      return true;
    case ParamType::kSize:
    case ParamType::kCount: {
      const std::vector<std::string> bounds = rangeBounds(spec.accepted);
      uint64_t low = 0, high = UINT64_MAX;
      std::string ignored;
      parseByteCount(bounds.front(), &low, &ignored);
      parseByteCount(bounds.back(), &high, &ignored);
      const std::string range =
          spec.type == ParamType::kSize
              ? "accepted: a byte count from " + formatBytes(low) + " to " + formatBytes(high) +
                    ", e.g. 4096, 256K, 64M"
              : "accepted: a whole number from " + formatBytes(low) + " to " + formatBytes(high) +
                    " (K, M, G: times 1024, 1024^2, 1024^3), e.g. 100, 4K";
      if (!parseByteCount(text, &out->number, why)) {
        *why += "; " + range;
        return false;
      }
      if (out->number < low || out->number > high) {
        *why = "out of range; " + range;
        return false;
      }
      out->text = formatBytes(out->number);
      return true;
    }
    case ParamType::kDecimal: {
      const std::vector<std::string> bounds = rangeBounds(spec.accepted);
      const double low = std::strtod(bounds.front().c_str(), nullptr);
      const double high = std::strtod(bounds.back().c_str(), nullptr);
      const std::string range =
          "accepted: a decimal number from " + bounds.front() + " to " + bounds.back();
      const std::string s = trim(text);
      char* end = nullptr;
      const double value = s.empty() ? 0 : std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() ||
          s.find_first_of("xXnNiI") != std::string::npos) {
        *why = range + ", e.g. 1.5";
        return false;
      }
      if (!(value >= low && value <= high)) {
        *why = "out of range; " + range;
        return false;
      }
      out->decimal = value;
      out->number = 0;
      out->text = formatDecimal(value);
      return true;
    }
    case ParamType::kEnum: {
      const std::vector<std::string> choices = split(spec.accepted, '|');
      const std::string wanted = upper(trim(text));
      for (size_t i = 0; i < choices.size(); ++i) {
        if (upper(choices[i]) == wanted) {
          out->number = i;
          out->text = choices[i];
          return true;
        }
      }
      *why = "accepted: " + joinChoices(spec.accepted);
      return false;
    }
    case ParamType::kList: {
      const std::vector<std::string> choices = split(spec.accepted, '|');
      const uint64_t all = (uint64_t{1} << choices.size()) - 1;
      const std::vector<std::string> tokens = split(text, ',');
      uint64_t mask = (!tokens.empty() && !tokens[0].empty() && tokens[0][0] == '^') ? all : 0;
      for (const std::string& token : tokens) {
        const bool exclude = !token.empty() && token[0] == '^';
        const std::string name = upper(exclude ? token.substr(1) : token);
        uint64_t bits = 0;
        if (name == "ALL") bits = all;
        for (size_t i = 0; i < choices.size(); ++i) {
          if (upper(choices[i]) == name) bits = uint64_t{1} << i;
        }
        if (bits == 0) {
          *why = "unknown entry '" + token + "'; accepted: a comma-separated list of ALL, " +
                 joinChoices(spec.accepted) + " (^NAME excludes)";
          return false;
        }
        mask = exclude ? (mask & ~bits) : (mask | bits);
      }
      out->number = mask;
      std::string canonical;
      for (size_t i = 0; i < choices.size(); ++i) {
        if ((mask >> i) & 1) canonical += (canonical.empty() ? "" : ",") + choices[i];
      }
      out->text = mask == all ? "ALL" : canonical;
      return true;
    }
    case ParamType::kGrid: {
      const std::string s = upper(trim(text));
      const size_t separator = s.find('X');
      auto dimension = [](const std::string& digits) -> uint64_t {
        if (digits.empty() || digits.size() > 6 ||
            digits.find_first_not_of("0123456789") != std::string::npos) {
          return 0;
        }
        return std::stoull(digits);
      };
      const uint64_t x = separator == std::string::npos ? 0 : dimension(s.substr(0, separator));
      const uint64_t y = separator == std::string::npos ? 0 : dimension(s.substr(separator + 1));
      if (x == 0 || y == 0) {
        *why = "accepted: XxY with two positive integers, e.g. 2x4 (X ranks per row, Y rows)";
        return false;
      }
      out->number = x << 32 | y;
      out->text = std::to_string(x) + "x" + std::to_string(y);
      return true;
    }
    case ParamType::kPath:
      out->number = 0;
      out->text = trim(text);
      return true;
  }
  *why = "internal error: unknown parameter type";
  return false;
}

ConfigInputs configInputsFromProcess() {
  ConfigInputs inputs;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, kPrefix, std::strlen(kPrefix)) != 0) continue;
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    inputs.environment.emplace_back(std::string(*entry, static_cast<size_t>(equals - *entry)),
                                    std::string(equals + 1));
  }
  inputs.readFile = [](const std::string& path, std::string* contents) {
    std::ifstream file(path);
    if (!file) return false;
    std::ostringstream buffer;
    buffer << file.rdbuf();
    *contents = buffer.str();
    return true;
  };
  return inputs;
}

Config Config::load(const ConfigInputs& inputs) {
  Config config;
  for (int i = 0; i < kParamCount; ++i) {
    if (*kSpecs[i].defaultText == '\0') continue;  // unset by default: number 0, empty text
    std::string why;
    const bool parsed = parseParamValue(kSpecs[i], kSpecs[i].defaultText, &config.values_[i], &why);
    if (!parsed)
      config.diagnostics_.push_back(std::string("internal: bad default of ") + kSpecs[i].name);
  }

  auto apply = [&config](int index, const std::string& text, ValueSource source,
                         const std::string& where) {
    if (trim(text).empty()) return;  // an empty value means "unset"
    ParamValue parsed;
    std::string why;
    if (!parseParamValue(kSpecs[index], text, &parsed, &why)) {
      config.diagnostics_.push_back(std::string(kSpecs[index].name) + "='" + text + "'" + where +
                                    " is invalid: " + why + "; using the default " +
                                    config.values_[index].text);
      return;
    }
    parsed.source = source;
    config.values_[index] = parsed;
  };

  std::string configPath;
  for (const auto& [name, value] : inputs.environment) {
    if (name == paramSpec(Param::CONFIG).name) configPath = trim(value);
  }
  if (!configPath.empty()) {
    std::string contents;
    if (!inputs.readFile || !inputs.readFile(configPath, &contents)) {
      config.diagnostics_.push_back("GFSHIM_CONFIG='" + configPath +
                                    "' cannot be read; only the environment is used");
    } else {
      std::istringstream lines(contents);
      std::string line;
      for (int lineNo = 1; std::getline(lines, line); ++lineNo) {
        const std::string where = " (" + configPath + ":" + std::to_string(lineNo) + ")";
        const std::string content = trim(line.substr(0, line.find('#')));
        if (content.empty()) continue;
        const size_t equals = content.find('=');
        if (equals == std::string::npos) {
          config.diagnostics_.push_back("line '" + content + "'" + where +
                                        " is not of the form NAME = value; it is ignored");
          continue;
        }
        std::string key = upper(trim(content.substr(0, equals)));
        if (key.rfind(kPrefix, 0) != 0) key = kPrefix + key;
        const int index = findParam(key);
        if (index < 0) {
          config.diagnostics_.push_back(unknownParamMessage(key, where));
        } else if (index == static_cast<int>(Param::CONFIG)) {
          config.diagnostics_.push_back("GFSHIM_CONFIG inside a config file" + where +
                                        " is ignored (files do not nest)");
        } else {
          apply(index, trim(content.substr(equals + 1)), ValueSource::kFile, where);
        }
      }
    }
  }

  for (const auto& [name, value] : inputs.environment) {
    const int index = findParam(name);
    if (index < 0) {
      config.diagnostics_.push_back(unknownParamMessage(name, "='" + value + "'"));
    } else {
      apply(index, value, ValueSource::kEnv, "");
    }
  }
  return config;
}

int64_t Config::planHash() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  for (int i = 0; i < kParamCount; ++i) {
    if (kSpecs[i].scope != ParamScope::kPlan) continue;
    const std::string entry = std::string(kSpecs[i].name) + "=" + values_[i].text + "\n";
    for (unsigned char c : entry) {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  }
  return static_cast<int64_t>(hash >> 1);
}

std::string Config::planSummary() const {
  std::string summary;
  for (int i = 0; i < kParamCount; ++i) {
    if (kSpecs[i].scope != ParamScope::kPlan) continue;
    if (!summary.empty()) summary += ' ';
    summary += std::string(kSpecs[i].name) + "=" + values_[i].text;
  }
  return summary;
}

// ---- Settings from a Config: generated from the SETTING column of params.def ----------------

namespace {

// The rows checked at compile time; a failure names the parameter.
#define GFSHIM_CHECK_Member(NAME, TYPE, DEFAULT, ACCEPTED, ENUM)                              \
  static_assert(ParamType::k##TYPE != ParamType::kBool || std::string_view(DEFAULT) == "0" || \
                    std::string_view(DEFAULT) == "1",                                         \
                "GFSHIM_" #NAME ": a Bool's DEFAULT is 0 or 1 (Settings{} reads it)");
#define GFSHIM_CHECK_Choice(NAME, TYPE, DEFAULT, ACCEPTED, ENUM)                                 \
  static_assert(ParamType::k##TYPE == ParamType::kEnum,                                          \
                "GFSHIM_" #NAME ": Choice(...) is for Enum rows");                               \
  static_assert(choicesSpell<ENUM>(ACCEPTED),                                                    \
                "GFSHIM_" #NAME ": the enumerators of " #ENUM " must spell ACCEPTED, in order"); \
  static_assert(acceptedIndex(ACCEPTED, DEFAULT) >= 0, "GFSHIM_" #NAME ": DEFAULT not ACCEPTED");
#define GFSHIM_CHECK_Custom(NAME, TYPE, DEFAULT, ACCEPTED, ENUM)
#define GFSHIM_CHECK(NAME, TYPE, DEFAULT, ACCEPTED, KIND, MEMBER, ENUM) \
  GFSHIM_CHECK_##KIND(NAME, TYPE, DEFAULT, ACCEPTED, ENUM)
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) \
  GFSHIM_SETTING_ROW(GFSHIM_CHECK, NAME, TYPE, DEFAULT, ACCEPTED, SETTING)
#include "params.def"
#undef GFSHIM_PARAM
#undef GFSHIM_CHECK
#undef GFSHIM_CHECK_Member
#undef GFSHIM_CHECK_Choice
#undef GFSHIM_CHECK_Custom

constexpr const char* acceptedOf(Param param) { return kSpecs[static_cast<int>(param)].accepted; }

// A Member(...) or Choice(...) setting from its parsed value; the member's type (MemberTypeOf its
// TYPE, or the Choice's enum) picks the field of ParamValue.
void readSetting(const ParamValue& value, bool* out) { *out = value.number != 0; }
void readSetting(const ParamValue& value, uint64_t* out) { *out = value.number; }
void readSetting(const ParamValue& value, double* out) { *out = value.decimal; }
void readSetting(const ParamValue& value, std::string* out) { *out = value.text; }
template <typename Enum>
void readSetting(const ParamValue& value, Enum* out) {
  static_assert(std::is_enum_v<Enum>);
  *out = choiceAt<Enum>(value.number);
}

// The Custom(...) rows: typed forms of their own, each named by its row and written here only.
void torusDims(const ParamValue& value, Settings* settings) {  // Grid: X << 32 | Y, 0 when unset
  settings->torusX = static_cast<int>(value.number >> 32);
  settings->torusY = static_cast<int>(value.number & 0xffffffffu);
}

constexpr int kProbeHwlocBit = acceptedIndex(acceptedOf(Param::TOPO_DETECT), "HWLOC");
constexpr int kProbeUcxBit = acceptedIndex(acceptedOf(Param::TOPO_DETECT), "UCX");
static_assert(kProbeHwlocBit >= 0 && kProbeUcxBit >= 0, "GFSHIM_TOPO_DETECT names HWLOC and UCX");
void topoProbes(const ParamValue& value, Settings* settings) {  // List: bit i is ACCEPTED's i-th
  settings->probeHwloc = ((value.number >> kProbeHwlocBit) & 1) != 0;
  settings->probeUcx = ((value.number >> kProbeUcxBit) & 1) != 0;
}

static_assert(choicesSpell<LogLevel>(acceptedOf(Param::DEBUG)),
              "GFSHIM_DEBUG's ACCEPTED list must spell LogLevel's enumerators, in order");
void logLevel(const ParamValue& value, Settings* settings) {
  readSetting(value, &settings->log.level);
}

static_assert(choicesSpell<LogSubsys>(acceptedOf(Param::DEBUG_SUBSYS)),
              "GFSHIM_DEBUG_SUBSYS's ACCEPTED list must spell LogSubsys's enumerators, in order");
void logSubsystems(const ParamValue& value, Settings* settings) {
  uint32_t mask = 0;
  for (size_t i = 0; i < std::size(Choices<LogSubsys>::kNames); ++i) {
    if ((value.number >> i) & 1) mask |= static_cast<uint32_t>(Choices<LogSubsys>::kNames[i].value);
  }
  settings->log.subsysMask = mask;
}

// GFSHIM_CONFIG names the file Config::load reads; it has no typed setting.
void readByConfigLoad(const ParamValue&, Settings*) {}

}  // namespace

Settings settingsFrom(const Config& config) {
  Settings settings;
#define GFSHIM_FILL_Member(NAME, MEMBER) readSetting(config.value(Param::NAME), &settings.MEMBER);
#define GFSHIM_FILL_Choice(NAME, MEMBER) readSetting(config.value(Param::NAME), &settings.MEMBER);
#define GFSHIM_FILL_Custom(NAME, FUNCTION) FUNCTION(config.value(Param::NAME), &settings);
#define GFSHIM_FILL(NAME, TYPE, DEFAULT, ACCEPTED, KIND, MEMBER, ENUM) \
  GFSHIM_FILL_##KIND(NAME, MEMBER)
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) \
  GFSHIM_SETTING_ROW(GFSHIM_FILL, NAME, TYPE, DEFAULT, ACCEPTED, SETTING)
#include "params.def"
#undef GFSHIM_PARAM
#undef GFSHIM_FILL
#undef GFSHIM_FILL_Member
#undef GFSHIM_FILL_Choice
#undef GFSHIM_FILL_Custom
  return settings;
}

}  // namespace gfshim
