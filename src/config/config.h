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
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace gfshim {

enum class ParamType { kBool, kSize, kCount, kDecimal, kEnum, kList, kGrid, kPath };
enum class ParamScope { kPlan, kLocal };

enum class Param : int {
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, DOC) NAME,
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

// The typed view the rest of the shim uses.
enum class AlgoChoice { kAuto, kRing, kNative, kTorus2d };  // order of GFSHIM_ALGO's ACCEPTED list
enum class WireCodec { kNone, kFp16, kBf16 };          // order of GFSHIM_COMPRESS's ACCEPTED list
enum class ProgressChoice { kAuto, kCalls, kThread };  // order of GFSHIM_PROGRESS's ACCEPTED list

struct Settings {
  bool enable = true;
  AlgoChoice algo = AlgoChoice::kAuto;
  uint64_t minBytes = 0;
  uint64_t segmentBytes = 0;
  int torusX = 0;  // GFSHIM_TORUS_DIMS; 0 x 0 when unset
  int torusY = 0;
  bool fusion = true;                                     // GFSHIM_FUSION
  uint64_t fusionBytes = 0;                               // GFSHIM_FUSION_BYTES
  double cycleMs = 0;                                     // GFSHIM_CYCLE_MS
  ProgressChoice progressChoice = ProgressChoice::kAuto;  // GFSHIM_PROGRESS
  uint64_t fusionMinBytes = 0;                            // GFSHIM_FUSION_MIN_BYTES
  // Lossy modes (opt-in): the wire codec, and coarse-grained sparse communication (CSC).
  WireCodec compress = WireCodec::kNone;  // GFSHIM_COMPRESS
  uint64_t compressMinBytes = 0;          // GFSHIM_COMPRESS_MIN_BYTES
  bool prescale = false;                  // GFSHIM_PRESCALE
  double cscDensity = 0;                  // GFSHIM_CSC_DENSITY; 0: off
  uint64_t cscChunkElements = 0;          // GFSHIM_CSC_CHUNK
  uint64_t cscWarmupCalls = 0;            // GFSHIM_CSC_WARMUP_CALLS
  uint64_t cscMaxResidualBytes = 0;       // GFSHIM_CSC_MAX_RESIDUAL_BYTES
  uint64_t shadowEvery = 0;               // GFSHIM_SHADOW_EVERY; 0: off
  bool reproducible = false;              // GFSHIM_REPRODUCIBLE
  bool checkCalls = true;                 // GFSHIM_CHECK_CALLS
  // GPU buffers: NCCL (plugin), else staging through host memory, else the MPI.
  bool nccl = true;              // GFSHIM_NCCL
  double ncclTimeoutSec = 0;     // GFSHIM_NCCL_TIMEOUT_SEC; 0: no limit
  bool gpuStaging = true;        // GFSHIM_GPU_STAGING
  uint64_t gpuStagingBytes = 0;  // GFSHIM_GPU_STAGING_BYTES
  // Not parameters: set by the init hook. fusionAvailable: fused MPI_Iallreduce can run on every
  // rank (the progress mode below is agreed, and a thread got MPI_THREAD_MULTIPLE).
  // progressInCalls: the agreed mode is calls (engine/fusion_queue.h), not a thread.
  // nativeIallreduceBesideFusion: the MPI's own nonblocking collectives may run beside the fused
  // path's progress (calls, or an MPI whose are thread-safe: not Open MPI 4.1's libnbc), and no
  // rank had the CUDA driver at MPI_Init (so no rank needs the queue to stage a small call).
  bool fusionAvailable = false;
  bool progressInCalls = false;
  bool nativeIallreduceBesideFusion = false;
  std::string topoFile;    // GFSHIM_TOPO_FILE: replaces detection; empty: detect
  std::string topoDump;    // GFSHIM_TOPO_DUMP: where rank 0 writes what was detected
  std::string timeline;    // GFSHIM_TIMELINE: trace path prefix; empty: none
  bool probeHwloc = true;  // GFSHIM_TOPO_DETECT
  bool probeUcx = true;
  // GFSHIM_{INTRA,INTER}_{GBPS,LATENCY_US}; 0: detected (UCX), else the built-in default
  double intraGbps = 0, intraLatencyUs = 0, interGbps = 0, interLatencyUs = 0;
  LogFilter log;
  bool stats = false;
  bool strict = false;
  double stallWarnSec = 0;  // GFSHIM_STALL_WARN_SEC; 0: off
};
Settings settingsFrom(const Config& config);

}  // namespace gfshim
