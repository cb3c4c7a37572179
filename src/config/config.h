// The only place GFSHIM_* parameters are read. The declarative table is config/params.def; this
// file turns environment entries and an optional config file into checked, typed values.
//
// Precedence: default < GFSHIM_CONFIG file < environment. A bad value never changes behaviour
// silently: the parameter keeps its default and a diagnostic naming the variable, the value and
// what is accepted is recorded; the init hook prints the diagnostics on rank 0 and aborts instead
// when GFSHIM_STRICT=1.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace gfshim {

enum class ParamType { kBool, kSize, kCount, kDecimal, kEnum, kList, kGrid, kPath };
enum class ParamScope { kPlan, kLocal };

enum class Param : int {
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) NAME,
#include "params.def"
#undef GFSHIM_PARAM
  kCount
};
constexpr int kParamCount = static_cast<int>(Param::kCount);

struct ParamSpec {
  const char* name;  // full variable name, e.g. "GFSHIM_ALGO"
  ParamType type;
  const char* defaultText;
  const char* accepted;
  ParamScope scope;
  const char* doc;
};

const ParamSpec& paramSpec(Param param);
const char* paramTypeName(ParamType type);

enum class ValueSource { kDefault, kFile, kEnv };
const char* valueSourceName(ValueSource source);

struct ParamValue {
  uint64_t number = 0;  // Bool: 0/1; Size: bytes; Enum: index into ACCEPTED; List: bit mask;
                        // Grid: X << 32 | Y (0 when unset)
  double decimal = 0;   // Decimal only
  std::string text;     // canonical spelling (what gfshim-info prints and the plan hash covers)
  ValueSource source = ValueSource::kDefault;
};

// What the configuration is read from; tests build one by hand.
struct ConfigInputs {
  std::vector<std::pair<std::string, std::string>> environment;  // every GFSHIM_* entry
  std::function<bool(const std::string& path, std::string* contents)> readFile;
};
// Collects the GFSHIM_* entries of this process's environment: the one call site of environ.
ConfigInputs configInputsFromProcess();

class Config {
 public:
  // Never fails: unusable values fall back to their defaults and leave a diagnostic.
  static Config load(const ConfigInputs& inputs);
  static Config defaults() { return load(ConfigInputs{}); }

  const ParamValue& value(Param param) const { return values_[static_cast<int>(param)]; }
  bool flag(Param param) const { return value(param).number != 0; }
  uint64_t bytes(Param param) const { return value(param).number; }
  uint64_t count(Param param) const { return value(param).number; }
  int choice(Param param) const { return static_cast<int>(value(param).number); }
  uint32_t mask(Param param) const { return static_cast<uint32_t>(value(param).number); }
  const std::string& text(Param param) const { return value(param).text; }

  // One complete sentence per problem found while loading.
  const std::vector<std::string>& diagnostics() const { return diagnostics_; }
  // Hash of the canonical values of every Plan-scope parameter (63 bits, so its negation fits).
  int64_t planHash() const;
  // "GFSHIM_ENABLE=1 GFSHIM_ALGO=auto ...": the Plan-scope values, for mismatch reports.
  std::string planSummary() const;

 private:
  ParamValue values_[kParamCount];
  std::vector<std::string> diagnostics_;
};

// "256K" -> 262144: digits, then an optional K/M/G/T (powers of 1024) with an optional B/iB, or
// a bare B. On failure returns false and sets *why.
bool parseByteCount(const std::string& text, uint64_t* bytes, std::string* why);

// Parses one value of the given spec; on failure returns false and sets *why to what is accepted.
bool parseParamValue(const ParamSpec& spec, const std::string& text, ParamValue* out,
                     std::string* why);

// ---- The typed view the rest of the shim uses, generated from params.def ---------------------
//
// Each row's SETTING column declares its member of Settings and how settingsFrom fills it, so the
// table is the one list of parameters: no hand-kept struct or assignment list to keep in step.
// (UCC fills a hand-declared struct through an offsetof table; here the X-macro declares the
// members too, typed by their row's TYPE, and offsetof on a struct holding std::string is only
// conditionally supported.)
//
// An Enum row's C++ enum is defined from one list, X(enumerator, value). The enumerators spell the
// ACCEPTED names in the same order (kTorus2d is "torus2d", case-insensitive), which config.cpp
// checks at compile time; Config's index into ACCEPTED becomes an enumerator through that list,
// never by a cast, so a value (pinned where it crosses the GPU plugin ABI) does not depend on
// where its name stands.

// An enumerator and its spelling: the enumerator's name without its k.
struct ChoiceName {
  int value;
  const char* name;
};
// Choices<Enum>::kNames: Enum's enumerators in the order of its parameter's ACCEPTED list.
template <typename Enum>
struct Choices;

#define GFSHIM_ENUMERATOR(NAME, VALUE) NAME = VALUE,
#define GFSHIM_CHOICE(Enum, NAME) \
  ChoiceName { static_cast<int>(Enum::NAME), &#NAME[1] }
#define GFSHIM_CHOICE_OF_E(NAME, VALUE) GFSHIM_CHOICE(E, NAME),
#define GFSHIM_CHOICES(Enum, LIST)                                     \
  template <>                                                          \
  struct Choices<Enum> {                                               \
    using E = Enum;                                                    \
    static constexpr ChoiceName kNames[] = {LIST(GFSHIM_CHOICE_OF_E)}; \
  }

// GFSHIM_ALGO, GFSHIM_TORUS_COLUMN, GFSHIM_COMPRESS, GFSHIM_CSC_MOMENTUM_OUTPUT, GFSHIM_CSC_KEY,
// GFSHIM_PROGRESS.
#define GFSHIM_ALGO_CHOICES(X) \
  X(kAuto, 0) X(kRing, 1) X(kNative, 2) X(kTorus2d, 3) X(kHierarchical, 4)
enum class AlgoChoice : int { GFSHIM_ALGO_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(AlgoChoice, GFSHIM_ALGO_CHOICES);

#define GFSHIM_TORUS_COLUMN_CHOICES(X) X(kAuto, 0) X(kRing, 1) X(kHalving, 2) X(kSplit, 3)
enum class TorusColumnChoice : int { GFSHIM_TORUS_COLUMN_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(TorusColumnChoice, GFSHIM_TORUS_COLUMN_CHOICES);

#define GFSHIM_COMPRESS_CHOICES(X) X(kNone, 0) X(kFp16, 1) X(kBf16, 2)
enum class WireCodec : int { GFSHIM_COMPRESS_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(WireCodec, GFSHIM_COMPRESS_CHOICES);
// WireCodec crosses the GPU plugin ABI (GpuCall::codec, GpuFusedCall::codec in
// src/gpu/gpu_plugin_api.h) and indexes the stats' rows per codec: its values are pinned, whatever
// the order of the names. Changing one is an ABI change (kGpuPluginAbiVersion).
static_assert(sizeof(WireCodec) == 4 && static_cast<int>(WireCodec::kNone) == 0 &&
                  static_cast<int>(WireCodec::kFp16) == 1 &&
                  static_cast<int>(WireCodec::kBf16) == 2,
              "WireCodec's values are part of the GPU plugin ABI");

#define GFSHIM_CSC_MOMENTUM_OUTPUT_CHOICES(X) X(kUpdate, 0) X(kGradient, 1)
enum class CscMomentumOutput : int { GFSHIM_CSC_MOMENTUM_OUTPUT_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(CscMomentumOutput, GFSHIM_CSC_MOMENTUM_OUTPUT_CHOICES);

#define GFSHIM_CSC_KEY_CHOICES(X) X(kAddress, 0) X(kPosition, 1)
enum class CscKey : int { GFSHIM_CSC_KEY_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(CscKey, GFSHIM_CSC_KEY_CHOICES);

#define GFSHIM_PROGRESS_CHOICES(X) X(kAuto, 0) X(kCalls, 1) X(kThread, 2)
enum class ProgressChoice : int { GFSHIM_PROGRESS_CHOICES(GFSHIM_ENUMERATOR) };
GFSHIM_CHOICES(ProgressChoice, GFSHIM_PROGRESS_CHOICES);

// LogLevel and LogSubsys are declared in common/log.h; their enumerators are named here (no value
// column) for GFSHIM_DEBUG and GFSHIM_DEBUG_SUBSYS, in ACCEPTED's order, which config.cpp checks.
// A LogSubsys value is a bit: ACCEPTED's i-th name sets its enumerator's bit.
#define GFSHIM_LOG_LEVEL_CHOICES(X) X(kNone, ) X(kWarn, ) X(kInfo, ) X(kTrace, )
GFSHIM_CHOICES(LogLevel, GFSHIM_LOG_LEVEL_CHOICES);
#define GFSHIM_LOG_SUBSYS_CHOICES(X) \
  X(kInit, ) X(kConfig, ) X(kPolicy, ) X(kEngine, ) X(kAlgo, ) X(kTransport, ) X(kStats, )
GFSHIM_CHOICES(LogSubsys, GFSHIM_LOG_SUBSYS_CHOICES);
#undef GFSHIM_CHOICES
#undef GFSHIM_CHOICE_OF_E
#undef GFSHIM_CHOICE
#undef GFSHIM_ENUMERATOR

namespace detail {
constexpr char lowerAscii(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
// Whether the ACCEPTED entry starting at `entry` (ending at '|' or the end) is `name`, ignoring
// case.
constexpr bool entryIs(const char* entry, const char* name) {
  for (; *name != '\0'; ++entry, ++name) {
    if (*entry == '\0' || *entry == '|' || lowerAscii(*entry) != lowerAscii(*name)) return false;
  }
  return *entry == '\0' || *entry == '|';
}
}  // namespace detail

// Index of `name` in a '|'-separated ACCEPTED list, ignoring case; -1 when absent.
constexpr int acceptedIndex(const char* accepted, const char* name) {
  if (*accepted == '\0') return -1;
  for (int index = 0;; ++index) {
    if (detail::entryIs(accepted, name)) return index;
    while (*accepted != '\0' && *accepted != '|') ++accepted;
    if (*accepted == '\0') return -1;
    ++accepted;
  }
}

// Number of entries of a '|'-separated ACCEPTED list.
constexpr int acceptedCount(const char* accepted) {
  if (*accepted == '\0') return 0;
  int count = 1;
  for (; *accepted != '\0'; ++accepted) count += *accepted == '|' ? 1 : 0;
  return count;
}

// Whether Enum's enumerators spell `accepted`, one for one and in its order.
template <typename Enum>
constexpr bool choicesSpell(const char* accepted) {
  constexpr int kCount = static_cast<int>(std::size(Choices<Enum>::kNames));
  if (acceptedCount(accepted) != kCount) return false;
  for (int i = 0; i < kCount; ++i) {
    if (acceptedIndex(accepted, Choices<Enum>::kNames[i].name) != i) return false;
  }
  return true;
}

// The enumerator the i-th ACCEPTED name stands for (i as Config stores an Enum value).
template <typename Enum>
constexpr Enum choiceAt(uint64_t index) {
  return static_cast<Enum>(
      Choices<Enum>::kNames[index < std::size(Choices<Enum>::kNames) ? index : 0].value);
}

// The enumerator spelled `text` (a DEFAULT); the first when none is.
template <typename Enum>
constexpr Enum choiceSpelled(const char* text) {
  for (const ChoiceName& choice : Choices<Enum>::kNames) {
    if (detail::entryIs(text, choice.name)) return static_cast<Enum>(choice.value);
  }
  return static_cast<Enum>(Choices<Enum>::kNames[0].value);
}

// The C++ type of a Member(...) setting of each TYPE.
template <ParamType kType>
struct MemberType;  // Enum: Choice(...); List and Grid: Custom(...)
template <>
struct MemberType<ParamType::kBool> {
  using type = bool;
};
template <>
struct MemberType<ParamType::kSize> {
  using type = uint64_t;
};
template <>
struct MemberType<ParamType::kCount> {
  using type = uint64_t;
};
template <>
struct MemberType<ParamType::kDecimal> {
  using type = double;
};
template <>
struct MemberType<ParamType::kPath> {
  using type = std::string;
};
template <ParamType kType>
using MemberTypeOf = typename MemberType<kType>::type;

// A Bool DEFAULT ("0" or "1", which config.cpp checks) as a value.
constexpr bool flagDefault(const char* text) { return text[0] == '1' && text[1] == '\0'; }

// A Member(...) setting's value in Settings{}: the row's DEFAULT for Bool and Path, 0 for numbers.
template <ParamType kType>
MemberTypeOf<kType> memberDefault(const char* defaultText) {
  if constexpr (kType == ParamType::kBool) {
    return flagDefault(defaultText);
  } else if constexpr (kType == ParamType::kPath) {
    return defaultText;
  } else {
    return 0;
  }
}

// GFSHIM_SETTING_ROW(MACRO, NAME, TYPE, DEFAULT, ACCEPTED, SETTING) calls
// MACRO(NAME, TYPE, DEFAULT, ACCEPTED, KIND, MEMBER, ENUM) with a row's SETTING spread into KIND
// (Member, Choice or Custom), MEMBER (the member, or Custom's function) and ENUM (Choice's enum,
// else void), so that a generator can dispatch on KIND with GFSHIM_<its prefix>_##KIND.
#define GFSHIM_SETTING_ROW(MACRO, NAME, TYPE, DEFAULT, ACCEPTED, SETTING) \
  GFSHIM_SETTING_APPLY(MACRO, (NAME, TYPE, DEFAULT, ACCEPTED, GFSHIM_SETTING_SPREAD_##SETTING))
#define GFSHIM_SETTING_APPLY(MACRO, ARGS) MACRO ARGS
#define GFSHIM_SETTING_SPREAD_Member(member) Member, member, void
#define GFSHIM_SETTING_SPREAD_Choice(member, Enum) Choice, member, Enum
#define GFSHIM_SETTING_SPREAD_Custom(function) Custom, function, void

struct Settings {
  // One member per Member(...) and Choice(...) row of params.def. Settings{} holds the table's
  // defaults, except that numbers are 0: they come from a Config (settingsFrom), and a test that
  // builds a Settings by hand sets the ones it uses.
#define GFSHIM_DECLARE_Member(NAME, TYPE, DEFAULT, MEMBER, ENUM) \
  MemberTypeOf<ParamType::k##TYPE> MEMBER = memberDefault<ParamType::k##TYPE>(DEFAULT);
#define GFSHIM_DECLARE_Choice(NAME, TYPE, DEFAULT, MEMBER, ENUM) \
  ENUM MEMBER = choiceSpelled<ENUM>(DEFAULT);
#define GFSHIM_DECLARE_Custom(NAME, TYPE, DEFAULT, MEMBER, ENUM)
#define GFSHIM_DECLARE(NAME, TYPE, DEFAULT, ACCEPTED, KIND, MEMBER, ENUM) \
  GFSHIM_DECLARE_##KIND(NAME, TYPE, DEFAULT, MEMBER, ENUM)
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) \
  GFSHIM_SETTING_ROW(GFSHIM_DECLARE, NAME, TYPE, DEFAULT, ACCEPTED, SETTING)
#include "params.def"
#undef GFSHIM_PARAM
#undef GFSHIM_DECLARE
#undef GFSHIM_DECLARE_Member
#undef GFSHIM_DECLARE_Choice
#undef GFSHIM_DECLARE_Custom

  // The members of the Custom(...) rows, filled by their functions in config.cpp.
  int torusX = 0;  // GFSHIM_TORUS_DIMS; 0 x 0 when unset
  int torusY = 0;
  bool probeHwloc = true;  // GFSHIM_TOPO_DETECT
  bool probeUcx = true;
  LogFilter log;  // GFSHIM_DEBUG, GFSHIM_DEBUG_SUBSYS

  // Not parameters: set by the init hook. fusionAvailable: fused MPI_Iallreduce can run on every
  // rank (the progress mode, GFSHIM_PROGRESS, is agreed, and a thread got MPI_THREAD_MULTIPLE).
  // progressInCalls: the agreed mode is calls (mpi/fusion_queue.h), not a thread.
  // nativeIallreduceBesideFusion: the MPI's own nonblocking collectives may run beside the fused
  // path's progress (calls, or an MPI whose are thread-safe: not Open MPI 4.1's libnbc), and no
  // rank's program had loaded the CUDA driver before MPI_Init (so no rank needs the queue to
  // stage a small call).
  // fusionOversubscribed: fusion is unavailable because progress would be by thread
  // (GFSHIM_PROGRESS=auto without a progress hook) on a node with more ranks than CPUs.
  bool fusionAvailable = false;
  bool fusionOversubscribed = false;
  bool progressInCalls = false;
  bool nativeIallreduceBesideFusion = false;
};
Settings settingsFrom(const Config& config);

}  // namespace gfshim
