#include "config/config.h"

#include <gtest/gtest.h>

#include <map>

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

}  // namespace
}  // namespace gfshim
