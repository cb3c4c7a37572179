#include "config/config.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/cost_model.h"

namespace gfshim {
namespace {

ConfigInputs inputs(std::vector<std::pair<std::string, std::string>> env,
                    std::map<std::string, std::string> files = {}) {
  ConfigInputs in;
  in.environment = std::move(env);
  in.readFile = [files](const std::string& path, std::string* contents) {
    auto it = files.find(path);
    if (it == files.end()) return false;
    *contents = it->second;
    return true;
  };
  return in;
}

bool mentions(const Config& config, const std::string& text) {
  for (const std::string& d : config.diagnostics()) {
    if (d.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(Config, EveryDefaultParsesAndIsTheStartingValue) {
  const Config config = Config::defaults();
  EXPECT_TRUE(config.diagnostics().empty());
  for (int i = 0; i < kParamCount; ++i) {
    EXPECT_EQ(config.value(static_cast<Param>(i)).source, ValueSource::kDefault);
  }
  const Settings s = settingsFrom(config);
  EXPECT_TRUE(s.enable);
  EXPECT_EQ(s.algo, AlgoChoice::kAuto);
  EXPECT_EQ(s.minBytes, 256u * 1024);
  EXPECT_EQ(s.log.level, LogLevel::kWarn);
  EXPECT_FALSE(s.stats);
  EXPECT_FALSE(s.strict);
}

TEST(Config, SizesAcceptUnitsAndRejectGarbage) {
  const ParamSpec& spec = paramSpec(Param::MIN_BYTES);
  struct Case {
    const char* text;
    bool ok;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"0", true, 0},
      {"4096", true, 4096},
      {"256K", true, 262144},
      {"256k", true, 262144},
      {"64M", true, 64ull << 20},
      {"1G", true, 1ull << 30},
      {"1GiB", true, 1ull << 30},
      {"2KB", true, 2048},
      {"17B", true, 17},
      {" 8M ", true, 8ull << 20},
      {"1T", true, 1ull << 40},
      {"12Q", false, 0},
      {"-5", false, 0},
      {"", false, 0},
      {"M", false, 0},
      {"1.5M", false, 0},
      {"2T", false, 0},
      {"99999999999999999999999", false, 0},
      {"20000000000000000T", false, 0},
  };
  for (const Case& c : cases) {
    ParamValue value;
    std::string why;
    EXPECT_EQ(parseParamValue(spec, c.text, &value, &why), c.ok) << c.text;
    if (c.ok) {
      EXPECT_EQ(value.number, c.bytes) << c.text;
    } else {
      EXPECT_FALSE(why.empty()) << c.text;
    }
  }
  ParamValue value;
  std::string why;
  ASSERT_FALSE(parseParamValue(spec, "-1K", &value, &why));
  EXPECT_NE(why.find("negative"), std::string::npos) << why;
}

TEST(Config, SegmentBytesHasARange) {
  const ParamSpec& spec = paramSpec(Param::SEGMENT_BYTES);
  ParamValue value;
  std::string why;
  EXPECT_FALSE(parseParamValue(spec, "8", &value, &why));
  EXPECT_NE(why.find("64 to 1G"), std::string::npos) << why;
  EXPECT_FALSE(parseParamValue(spec, "2G", &value, &why));
  EXPECT_TRUE(parseParamValue(spec, "64", &value, &why));
  EXPECT_TRUE(parseParamValue(spec, "1G", &value, &why));
}

TEST(Config, BoolsAndEnums) {
  ParamValue value;
  std::string why;
  for (const char* yes : {"1", "true", "YES", "on"}) {
    ASSERT_TRUE(parseParamValue(paramSpec(Param::STATS), yes, &value, &why)) << yes;
    EXPECT_EQ(value.number, 1u);
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    ASSERT_TRUE(parseParamValue(paramSpec(Param::STATS), no, &value, &why)) << no;
    EXPECT_EQ(value.number, 0u);
  }
  EXPECT_FALSE(parseParamValue(paramSpec(Param::STATS), "2", &value, &why));
  EXPECT_FALSE(parseParamValue(paramSpec(Param::STATS), "maybe", &value, &why));

  ASSERT_TRUE(parseParamValue(paramSpec(Param::ALGO), "RING", &value, &why));
  EXPECT_EQ(value.text, "ring");
  EXPECT_EQ(static_cast<AlgoChoice>(value.number), AlgoChoice::kRing);
  ASSERT_TRUE(parseParamValue(paramSpec(Param::ALGO), "native", &value, &why));
  EXPECT_EQ(static_cast<AlgoChoice>(value.number), AlgoChoice::kNative);
  EXPECT_FALSE(parseParamValue(paramSpec(Param::ALGO), "tree", &value, &why));
  EXPECT_NE(why.find("auto, ring, native"), std::string::npos) << why;

  ASSERT_TRUE(parseParamValue(paramSpec(Param::DEBUG), "info", &value, &why));
  EXPECT_EQ(static_cast<LogLevel>(value.number), LogLevel::kInfo);
}

TEST(Config, SubsystemLists) {
  const ParamSpec& spec = paramSpec(Param::DEBUG_SUBSYS);
  ParamValue value;
  std::string why;
  ASSERT_TRUE(parseParamValue(spec, "POLICY,engine", &value, &why));
  EXPECT_EQ(value.number,
            static_cast<uint64_t>(LogSubsys::kPolicy) | static_cast<uint64_t>(LogSubsys::kEngine));
  ASSERT_TRUE(parseParamValue(spec, "^TRANSPORT", &value, &why));
  EXPECT_EQ(value.number & static_cast<uint64_t>(LogSubsys::kTransport), 0u);
  EXPECT_NE(value.number & static_cast<uint64_t>(LogSubsys::kInit), 0u);
  ASSERT_TRUE(parseParamValue(spec, "ALL,^STATS", &value, &why));
  EXPECT_EQ(value.number & static_cast<uint64_t>(LogSubsys::kStats), 0u);
  EXPECT_FALSE(parseParamValue(spec, "POLICY,NETWORK", &value, &why));
  EXPECT_NE(why.find("NETWORK"), std::string::npos);
}

TEST(Config, BadValueKeepsDefaultAndSaysWhy) {
  const Config config =
      Config::load(inputs({{"GFSHIM_MIN_BYTES", "12Q"}, {"GFSHIM_ALGO", "tree"}}));
  EXPECT_EQ(config.bytes(Param::MIN_BYTES), 256u * 1024);
  EXPECT_EQ(config.value(Param::MIN_BYTES).source, ValueSource::kDefault);
  EXPECT_EQ(config.text(Param::ALGO), "auto");
  ASSERT_EQ(config.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(config, "GFSHIM_MIN_BYTES='12Q' is invalid"));
  EXPECT_TRUE(mentions(config, "GFSHIM_ALGO='tree' is invalid: accepted: auto, ring, native"));
}

TEST(Config, NcclTimeoutIsSecondsWithARange) {
  EXPECT_DOUBLE_EQ(settingsFrom(Config::load(inputs({}))).ncclTimeoutSec, 300.0);
  EXPECT_DOUBLE_EQ(settingsFrom(Config::load(inputs({{"GFSHIM_NCCL_TIMEOUT_SEC", "2.5"}})))
                       .ncclTimeoutSec,
                   2.5);
  EXPECT_DOUBLE_EQ(settingsFrom(Config::load(inputs({{"GFSHIM_NCCL_TIMEOUT_SEC", "0"}})))
                       .ncclTimeoutSec,
                   0.0);  // wait forever
  for (const char* bad : {"-1", "86401", "soon", "5s"}) {
    const Config config = Config::load(inputs({{"GFSHIM_NCCL_TIMEOUT_SEC", bad}}));
    EXPECT_DOUBLE_EQ(settingsFrom(config).ncclTimeoutSec, 300.0) << bad;
    EXPECT_TRUE(
        mentions(config, "GFSHIM_NCCL_TIMEOUT_SEC='" + std::string(bad) + "' is invalid"))
        << bad;
  }
}

// A bad lossy setting never turns a lossy mode on: the default (exact) stays, with a diagnostic.
TEST(Config, BadLossySettingsStayExact) {
  const Config config = Config::load(inputs(
      {{"GFSHIM_COMPRESS", "fp8"}, {"GFSHIM_CSC_DENSITY", "1.5"}, {"GFSHIM_SHADOW_EVERY", "-1"}}));
  const Settings settings = settingsFrom(config);
  EXPECT_EQ(settings.compress, WireCodec::kNone);
  EXPECT_EQ(settings.cscDensity, 0.0);
  EXPECT_EQ(settings.shadowEvery, 0u);
  ASSERT_EQ(config.diagnostics().size(), 3u);
  EXPECT_TRUE(mentions(config, "GFSHIM_COMPRESS='fp8' is invalid: accepted: none, fp16, bf16"));
  EXPECT_TRUE(mentions(config, "GFSHIM_CSC_DENSITY='1.5'"));
  const Settings good = settingsFrom(Config::load(inputs(
      {{"GFSHIM_COMPRESS", "BF16"}, {"GFSHIM_CSC_DENSITY", "0.1"}, {"GFSHIM_CSC_CHUNK", "1K"}})));
  EXPECT_EQ(good.compress, WireCodec::kBf16);
  EXPECT_EQ(good.cscDensity, 0.1);
  EXPECT_EQ(good.cscChunkElements, 1024u);
}

// Momentum correction: m in [0, 0.9999], the output by name; bad values keep it off (exact CSC).
TEST(Config, MomentumCorrectionSettingsAndTheirBadValues) {
  const Settings good = settingsFrom(Config::load(inputs({{"GFSHIM_CSC_MOMENTUM", "0.9"},
                                                          {"GFSHIM_CSC_MOMENTUM_OUTPUT", "GRADIENT"},
                                                          {"GFSHIM_CSC_CLIP", "2.5"},
                                                          {"GFSHIM_CSC_MOMENTUM_DECAY", "0.9"}})));
  EXPECT_EQ(good.cscMomentum, 0.9);
  EXPECT_EQ(good.cscMomentumDecay, 0.9);
  EXPECT_EQ(Settings{}.cscMomentumDecay, 0.0);
  EXPECT_EQ(good.cscMomentumOutput, CscMomentumOutput::kGradient);
  EXPECT_EQ(good.cscClip, 2.5);
  EXPECT_EQ(Settings{}.cscMomentumOutput, CscMomentumOutput::kUpdate);
  const Config bad = Config::load(inputs({{"GFSHIM_CSC_MOMENTUM", "1"},
                                          {"GFSHIM_CSC_MOMENTUM_OUTPUT", "sgd"},
                                          {"GFSHIM_CSC_CLIP", "-1"},
                                          {"GFSHIM_CSC_MOMENTUM_DECAY", "1.5"}}));
  const Settings fallback = settingsFrom(bad);
  EXPECT_EQ(fallback.cscMomentumDecay, 0.0);
  EXPECT_EQ(fallback.cscMomentum, 0.0);
  EXPECT_EQ(fallback.cscMomentumOutput, CscMomentumOutput::kUpdate);
  EXPECT_EQ(fallback.cscClip, 0.0);
  EXPECT_EQ(bad.diagnostics().size(), 4u);
  EXPECT_TRUE(mentions(bad, "GFSHIM_CSC_MOMENTUM_OUTPUT='sgd' is invalid: accepted: update, gradient"));
}

// Counts (chunk elements, calls) take the byte sizes' suffixes but are not called bytes.
TEST(Config, CountsAreWholeNumbersNotBytes) {
  const Config config = Config::load(inputs({{"GFSHIM_CSC_WARMUP_CALLS", "2K"}}));
  EXPECT_EQ(settingsFrom(config).cscWarmupCalls, 2048u);
  EXPECT_EQ(paramSpec(Param::CSC_CHUNK).type, ParamType::kCount);
  const Config bad = Config::load(inputs({{"GFSHIM_CSC_CHUNK", "8"}}));
  EXPECT_EQ(settingsFrom(bad).cscChunkElements, 4096u);
  EXPECT_TRUE(mentions(bad, "GFSHIM_CSC_CHUNK='8' is invalid: out of range; accepted: a whole "
                            "number from 16 to 1G"));
  EXPECT_FALSE(mentions(bad, "byte"));
}

TEST(Config, UnknownVariablesAreReportedWithSuggestions) {
  const Config config = Config::load(inputs({{"GFSHIM_ALOG", "ring"}, {"GFSHIM_FOO", "1"}}));
  EXPECT_TRUE(mentions(
      config, "unknown parameter GFSHIM_ALOG='ring' is ignored (did you mean GFSHIM_ALGO?)"));
  EXPECT_TRUE(mentions(config, "unknown parameter GFSHIM_FOO='1' is ignored"));
  EXPECT_EQ(config.text(Param::ALGO), "auto");
}

TEST(Config, EmptyValueMeansUnset) {
  const Config config = Config::load(inputs({{"GFSHIM_ALGO", ""}}));
  EXPECT_TRUE(config.diagnostics().empty());
  EXPECT_EQ(config.value(Param::ALGO).source, ValueSource::kDefault);
}

TEST(Config, FileIsReadAndEnvironmentOverridesIt) {
  const std::string file =
      "# comment\n"
      "GFSHIM_ALGO = ring\n"
      "min_bytes = 1M   # trailing comment\n"
      "segment_bytes=64K\n"
      "\n";
  const Config config =
      Config::load(inputs({{"GFSHIM_CONFIG", "/etc/gfshim.conf"}, {"GFSHIM_SEGMENT_BYTES", "128K"}},
                          {{"/etc/gfshim.conf", file}}));
  EXPECT_TRUE(config.diagnostics().empty()) << config.diagnostics().front();
  EXPECT_EQ(config.text(Param::ALGO), "ring");
  EXPECT_EQ(config.value(Param::ALGO).source, ValueSource::kFile);
  EXPECT_EQ(config.bytes(Param::MIN_BYTES), 1u << 20);
  EXPECT_EQ(config.bytes(Param::SEGMENT_BYTES), 128u << 10);
  EXPECT_EQ(config.value(Param::SEGMENT_BYTES).source, ValueSource::kEnv);
}

TEST(Config, FileProblemsNameTheLine) {
  const std::string file = "ALGO = tree\nthis is not a setting\nALOG = ring\nCONFIG = other\n";
  const Config config = Config::load(inputs({{"GFSHIM_CONFIG", "f.conf"}}, {{"f.conf", file}}));
  EXPECT_TRUE(mentions(config, "GFSHIM_ALGO='tree' (f.conf:1) is invalid"));
  EXPECT_TRUE(mentions(config, "(f.conf:2) is not of the form NAME = value"));
  EXPECT_TRUE(mentions(config, "GFSHIM_ALOG (f.conf:3) is ignored (did you mean GFSHIM_ALGO?)"));
  EXPECT_TRUE(mentions(config, "(f.conf:4) is ignored (files do not nest)"));
}

TEST(Config, MissingFileIsReported) {
  const Config config = Config::load(inputs({{"GFSHIM_CONFIG", "/nonexistent"}}));
  EXPECT_TRUE(mentions(config, "GFSHIM_CONFIG='/nonexistent' cannot be read"));
}

TEST(Config, PlanHashCoversPlanParametersOnly) {
  const Config base = Config::defaults();
  EXPECT_GE(base.planHash(), 0);
  EXPECT_EQ(Config::load(inputs({{"GFSHIM_DEBUG", "TRACE"}, {"GFSHIM_STATS", "1"}})).planHash(),
            base.planHash());
  EXPECT_NE(Config::load(inputs({{"GFSHIM_MIN_BYTES", "1M"}})).planHash(), base.planHash());
  EXPECT_NE(Config::load(inputs({{"GFSHIM_ALGO", "ring"}})).planHash(), base.planHash());
  // Different spellings of the same value agree.
  EXPECT_EQ(Config::load(inputs({{"GFSHIM_MIN_BYTES", "262144"}})).planHash(), base.planHash());
  EXPECT_NE(base.planSummary().find("GFSHIM_MIN_BYTES=256K"), std::string::npos);
}

// Found by tests/fuzz/config_fuzzer.cpp: the canonical text was "%g" (6 digits), so
// GFSHIM_CSC_DENSITY=0.5 and 0.5000001 hashed alike while the ranks used different densities
// (different chunk counts, a different wire pattern). The text now reads back to the very value.
TEST(Config, DecimalCanonicalTextIsExactSoThePlanHashSeesEveryDigit) {
  const Config a = Config::load(inputs({{"GFSHIM_CSC_DENSITY", "0.5"}}));
  const Config b = Config::load(inputs({{"GFSHIM_CSC_DENSITY", "0.5000001"}}));
  EXPECT_NE(a.planHash(), b.planHash());
  EXPECT_EQ(a.text(Param::CSC_DENSITY), "0.5");
  EXPECT_EQ(b.text(Param::CSC_DENSITY), "0.5000001");
  const Config c = Config::load(inputs({{"GFSHIM_INTER_GBPS", "99999.99999999"}}));
  EXPECT_EQ(c.text(Param::INTER_GBPS), "99999.99999999");
  for (const char* text : {"0.1", "1e-05", "1000", "0.30000000000000004", "99999.99999999"}) {
    ParamValue first, again;
    std::string why;
    ASSERT_TRUE(parseParamValue(paramSpec(Param::INTER_GBPS), text, &first, &why)) << text;
    ASSERT_TRUE(parseParamValue(paramSpec(Param::INTER_GBPS), first.text, &again, &why)) << text;
    EXPECT_EQ(again.text, first.text);
    EXPECT_EQ(again.decimal, first.decimal) << text;
  }
}

// ---- Settings, generated from the SETTING column of params.def ----

// A valid value other than the default: the other flag, the range's upper end (else its lower
// one), the last choice (else the first), a path.
std::string otherValue(const ParamSpec& spec, const std::string& defaultText) {
  const std::string accepted = spec.accepted;
  switch (spec.type) {
    case ParamType::kBool:
      return defaultText == "1" ? "0" : "1";
    case ParamType::kSize:
    case ParamType::kCount:
    case ParamType::kDecimal: {
      const size_t dots = accepted.find("..");
      const std::string high = accepted.substr(dots + 2);
      return high != defaultText ? high : accepted.substr(0, dots);
    }
    case ParamType::kEnum: {
      const std::string first = accepted.substr(0, accepted.find('|'));
      const std::string last = accepted.substr(accepted.rfind('|') + 1);
      return last != defaultText ? last : first;
    }
    case ParamType::kPath:
      return "/tmp/gfshim-settings-test";
    case ParamType::kList:
    case ParamType::kGrid:
      break;
  }
  return "";
}

// Whether a setting holds a parsed value; an enumerator by its name, not its position.
bool holds(bool setting, const ParamValue& value) { return setting == (value.number != 0); }
bool holds(uint64_t setting, const ParamValue& value) { return setting == value.number; }
bool holds(double setting, const ParamValue& value) { return setting == value.decimal; }
bool holds(const std::string& setting, const ParamValue& value) { return setting == value.text; }
template <typename Enum>
bool holds(Enum setting, const ParamValue& value) {
  for (const ChoiceName& choice : Choices<Enum>::kNames) {
    if (choice.value == static_cast<int>(setting)) {
      return acceptedIndex(value.text.c_str(), choice.name) == 0 &&
             acceptedCount(value.text.c_str()) == 1;
    }
  }
  return false;
}

// Setting GFSHIM_<param> changes the member `read` reads, to the value Config parsed.
template <typename Read>
void expectFollows(Param param, Read read) {
  const ParamSpec& spec = paramSpec(param);
  const Config defaults = Config::defaults();
  const std::string text = otherValue(spec, defaults.text(param));
  const Config config = Config::load(inputs({{spec.name, text}}));
  ASSERT_TRUE(config.diagnostics().empty()) << spec.name << "=" << text;
  EXPECT_TRUE(holds(read(settingsFrom(config)), config.value(param))) << spec.name << "=" << text;
  EXPECT_TRUE(holds(read(settingsFrom(defaults)), defaults.value(param))) << spec.name;
  EXPECT_FALSE(read(settingsFrom(config)) == read(settingsFrom(defaults))) << spec.name;
}

// Settings{} holds the table's default, except that numbers are 0.
template <typename Read>
void expectDefaultConstructed(Param param, Read read) {
  const ParamSpec& spec = paramSpec(param);
  const auto constructed = read(Settings{});
  if (spec.type == ParamType::kSize || spec.type == ParamType::kCount ||
      spec.type == ParamType::kDecimal) {
    EXPECT_TRUE(constructed == decltype(constructed){}) << spec.name;
  } else {
    EXPECT_TRUE(holds(constructed, Config::defaults().value(param))) << spec.name;
  }
}

#define GFSHIM_EACH_Member(NAME, MEMBER) \
  GFSHIM_CHECK_SETTING(Param::NAME, [](const Settings& s) { return s.MEMBER; });
#define GFSHIM_EACH_Choice(NAME, MEMBER) GFSHIM_EACH_Member(NAME, MEMBER)
#define GFSHIM_EACH_Custom(NAME, FUNCTION)
#define GFSHIM_EACH(NAME, TYPE, DEFAULT, ACCEPTED, KIND, MEMBER, ENUM) \
  GFSHIM_EACH_##KIND(NAME, MEMBER)
#define GFSHIM_PARAM(NAME, TYPE, DEFAULT, ACCEPTED, SCOPE, SETTING, DOC) \
  GFSHIM_SETTING_ROW(GFSHIM_EACH, NAME, TYPE, DEFAULT, ACCEPTED, SETTING)

TEST(Settings, EveryGeneratedMemberFollowsItsParameter){
#define GFSHIM_CHECK_SETTING expectFollows
#include "params.def"
#undef GFSHIM_CHECK_SETTING
}

TEST(Settings, DefaultConstructedHoldsTheTableDefaultsExceptNumbers){
#define GFSHIM_CHECK_SETTING expectDefaultConstructed
#include "params.def"
#undef GFSHIM_CHECK_SETTING
}

#undef GFSHIM_PARAM
#undef GFSHIM_EACH
#undef GFSHIM_EACH_Member
#undef GFSHIM_EACH_Choice
#undef GFSHIM_EACH_Custom

// The cost model's constants are the parameters' defaults (src/engine/cost_model.h).
TEST(Settings, CostModelDefaultsAreTheModelsConstants) {
  const Settings defaults = settingsFrom(Config::defaults());
  EXPECT_DOUBLE_EQ(defaults.rendezvousUs * 1e-6, kRendezvousSeconds);
  EXPECT_DOUBLE_EQ(defaults.reduceGbps * 1e9 / 8, kReduceBytesPerSecond);
}

TEST(Settings, CustomRows) {
  const Settings defaults = settingsFrom(Config::defaults());
  EXPECT_EQ(defaults.torusX, 0);
  EXPECT_EQ(defaults.torusY, 0);
  EXPECT_TRUE(defaults.probeHwloc);
  EXPECT_TRUE(defaults.probeUcx);
  EXPECT_EQ(defaults.log.level, LogLevel::kWarn);
  EXPECT_EQ(defaults.log.subsysMask, (1u << 7) - 1);

  const Settings set =
      settingsFrom(Config::load(inputs({{"GFSHIM_TORUS_DIMS", "2x3"},
                                        {"GFSHIM_TOPO_DETECT", "ucx"},
                                        {"GFSHIM_DEBUG", "trace"},
                                        {"GFSHIM_DEBUG_SUBSYS", "engine,POLICY"}})));
  EXPECT_EQ(set.torusX, 2);
  EXPECT_EQ(set.torusY, 3);
  EXPECT_FALSE(set.probeHwloc);
  EXPECT_TRUE(set.probeUcx);
  EXPECT_EQ(set.log.level, LogLevel::kTrace);
  EXPECT_EQ(set.log.subsysMask,
            static_cast<uint32_t>(LogSubsys::kPolicy) | static_cast<uint32_t>(LogSubsys::kEngine));

  const Settings noUcx = settingsFrom(Config::load(inputs({{"GFSHIM_TOPO_DETECT", "^UCX"}})));
  EXPECT_TRUE(noUcx.probeHwloc);
  EXPECT_FALSE(noUcx.probeUcx);
}

// The compile-time check behind Choice(...) rows: reordering, adding or dropping a name on one
// side only fails it.
TEST(Settings, EnumeratorsMustSpellTheAcceptedListInOrder) {
  EXPECT_TRUE(choicesSpell<AlgoChoice>("auto|ring|native|torus2d|hierarchical"));
  EXPECT_TRUE(choicesSpell<AlgoChoice>("AUTO|Ring|native|TORUS2D|Hierarchical"));
  EXPECT_FALSE(choicesSpell<AlgoChoice>("auto|native|ring|torus2d|hierarchical"));
  EXPECT_FALSE(choicesSpell<AlgoChoice>("auto|ring|native|torus2d"));
  EXPECT_FALSE(choicesSpell<AlgoChoice>("auto|ring|native|torus2d|hierarchical|tree"));
  EXPECT_FALSE(choicesSpell<AlgoChoice>("auto|ring|native|torus|hierarchical"));
  EXPECT_FALSE(choicesSpell<WireCodec>("none|bf16|fp16"));
  EXPECT_TRUE(choicesSpell<LogLevel>(paramSpec(Param::DEBUG).accepted));
  EXPECT_EQ(acceptedIndex("HWLOC|UCX", "ucx"), 1);
  EXPECT_EQ(acceptedIndex("HWLOC|UCX", "UC"), -1);
  EXPECT_EQ(acceptedIndex("HWLOC|UCX", "UCXX"), -1);
  EXPECT_EQ(acceptedIndex("", "UCX"), -1);
  EXPECT_EQ(acceptedCount(""), 0);
  EXPECT_EQ(acceptedCount("a|b|c"), 3);
}

// Values that cross the GPU plugin ABI keep their numbers whatever the order of the names.
TEST(Settings, WireCodecValuesArePinnedAndReadByName) {
  EXPECT_EQ(settingsFrom(Config::load(inputs({{"GFSHIM_COMPRESS", "bf16"}}))).compress,
            WireCodec::kBf16);
  EXPECT_EQ(static_cast<int>(WireCodec::kBf16), 2);
  EXPECT_EQ(choiceAt<WireCodec>(2), WireCodec::kBf16);
}

}  // namespace
}  // namespace gfshim
