// The NCCL plugin (cuda/nccl_plugin.cpp) through its C table, dlopened as libgfshim.so does:
// from the build directory, or from $GFSHIM_TEST_CUDA_PLUGIN where the test runs away from its
// build (bench/gpu_check.sh on the GPU machine).
//
// Everywhere: the table loads, probe() agrees with the machine (false with a reason naming the
// device where there is none), supports() lists NCCL's types and ops. On a GPU: one-rank groups
// (world 1, grid 1 x 1), where every allreduce must return its input bit for bit (exact), the
// input rounded through 16 bits (fp16/bf16: decodeHalf(encodeHalf(x)) exactly), the exact input
// after an overflow redo, and, for CSC, what the CPU's cscAllreduce gives over the same calls
// with a one-rank stand-in for its collectives. Receive buffers are poisoned before each call.
// The GPU cases skip with the probe's reason where no GPU is usable; main() then exits 77, which
// ctest reports as skipped.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compress/csc.h"
#include "compress/half_codec.h"
#include "gpu/gpu_plugin_api.h"

namespace gfshim {
namespace {

using Api = const GpuPluginApi* (*)();

const GpuPluginApi* pluginApi() {
  static const GpuPluginApi* api = []() -> const GpuPluginApi* {
    const char* relocated = std::getenv("GFSHIM_TEST_CUDA_PLUGIN");
    const std::string path = relocated != nullptr ? relocated : GFSHIM_CUDA_PLUGIN_PATH;
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      ADD_FAILURE() << "dlopen " << path << ": " << (error ? error : "?");
      return nullptr;
    }
    auto entry = reinterpret_cast<Api>(dlsym(library, "gfshim_gpu_plugin_api"));
    if (entry == nullptr) {
      ADD_FAILURE() << "no gfshim_gpu_plugin_api in " << path;
      return nullptr;
    }
    return entry();
  }();
  return api;
}

bool machineHasGpu() {
  int devices = 0;
  const bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  return found;
}

TEST(GpuPluginEverywhere, LoadsWithThisBuildsAbiVersion) {
  const GpuPluginApi* api = pluginApi();
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->abiVersion, kGpuPluginAbiVersion);
  EXPECT_NE(api->probe, nullptr);
  EXPECT_NE(api->uniqueId, nullptr);
  EXPECT_NE(api->groupPrepare, nullptr);
  EXPECT_NE(api->groupConnectStart, nullptr);
  EXPECT_NE(api->groupConnectPoll, nullptr);
  EXPECT_NE(api->fusedAllreduce, nullptr);
  EXPECT_NE(api->groupDestroy, nullptr);
  EXPECT_NE(api->supports, nullptr);
  EXPECT_NE(api->allreduce, nullptr);
}

TEST(GpuPluginEverywhere, ProbeAgreesWithTheMachine) {
  const GpuPluginApi* api = pluginApi();
  ASSERT_NE(api, nullptr);
  char why[512] = {};
  const bool usable = api->probe(0, why, sizeof why);
  if (machineHasGpu()) {
    EXPECT_TRUE(usable) << "a GPU is present, yet: " << why;
  } else {
    EXPECT_FALSE(usable);
    EXPECT_NE(std::string(why).find("device"), std::string::npos) << why;
  }
  char badWhy[512] = {};
  EXPECT_FALSE(api->probe(1 << 20, badWhy, sizeof badWhy));
  EXPECT_STRNE(badWhy, "");
  std::memset(badWhy, 0, sizeof badWhy);
  EXPECT_FALSE(api->probe(-1, badWhy, sizeof badWhy));
  EXPECT_STRNE(badWhy, "");
  EXPECT_EQ(api->probe(0, nullptr, 0), usable);  // no reason wanted: the same answer
  if (!machineHasGpu()) std::printf("probe without a GPU: %s\n", why);
}

TEST(GpuPluginEverywhere, SupportsExactlyNcclsTypesAndOps) {
  const GpuPluginApi* api = pluginApi();
  ASSERT_NE(api, nullptr);
  for (DType type : {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kUInt32, DType::kInt64,
                     DType::kUInt64, DType::kFloat32, DType::kFloat64}) {
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin}) {
      EXPECT_TRUE(api->supports(type, op)) << dtypeName(type) << " " << redOpName(op);
    }
    EXPECT_FALSE(api->supports(type, RedOp::kBitXor)) << dtypeName(type);
    EXPECT_FALSE(api->supports(type, RedOp::kLogicalAnd)) << dtypeName(type);
  }
  for (DType type :
       {DType::kInt16, DType::kUInt16, DType::kLongDouble, DType::kComplexFloat32,
        DType::kComplexFloat64, DType::kBool, DType::kByte, DType::kFloatInt, DType::kDoubleInt}) {
    EXPECT_FALSE(api->supports(type, RedOp::kSum)) << dtypeName(type);
  }
  EXPECT_FALSE(api->supports(DType::kFloatInt, RedOp::kMaxLoc));
}

TEST(GpuPluginEverywhere, UniqueIdsDifferOrTheReasonIsGiven) {
  const GpuPluginApi* api = pluginApi();
  ASSERT_NE(api, nullptr);
  uint8_t first[kNcclUniqueIdBytes] = {}, second[kNcclUniqueIdBytes] = {};
  char why[512] = {};
  if (!api->uniqueId(first, why, sizeof why)) {
    EXPECT_STRNE(why, "");  // NCCL missing, or no network interface for its bootstrap
    return;
  }
  ASSERT_TRUE(api->uniqueId(second, why, sizeof why)) << why;
  EXPECT_NE(std::memcmp(first, second, kNcclUniqueIdBytes), 0);
}

TEST(GpuPluginEverywhere, BadArgumentsFailWithAReasonAndLeaveNothing) {
  const GpuPluginApi* api = pluginApi();
  ASSERT_NE(api, nullptr);
  GpuGroupSpec spec;  // device -1, world 0
  void* group = reinterpret_cast<void*>(uintptr_t{1});
  char why[512] = {};
  EXPECT_FALSE(api->groupPrepare(&spec, &group, why, sizeof why));
  EXPECT_EQ(group, nullptr);
  EXPECT_NE(std::string(why).find("invalid spec"), std::string::npos) << why;
  spec.device = 0;
  spec.worldSize = 4;
  spec.worldRank = 1;
  spec.rowSize = 3;  // 3 x 1 is not a grid of 4 ranks
  spec.colSize = 1;
  std::memset(why, 0, sizeof why);
  EXPECT_FALSE(api->groupPrepare(&spec, &group, why, sizeof why));
  EXPECT_STRNE(why, "");
  EXPECT_FALSE(api->groupConnectStart(nullptr, why, sizeof why));
  std::memset(why, 0, sizeof why);
  EXPECT_EQ(api->groupConnectPoll(nullptr, why, sizeof why), kGpuConnectFailed);
  EXPECT_STRNE(why, "");
  GpuCall call;
  GpuCallRecord record;
  std::memset(why, 0, sizeof why);
  EXPECT_FALSE(api->allreduce(nullptr, &call, &record, why, sizeof why));
  EXPECT_STRNE(why, "");
  api->groupDestroy(nullptr, false);  // a no-op
  api->groupDestroy(nullptr, true);
}

// ---- GPU cases ----------------------------------------------------------------------------------

// Device memory for the duration of a test.
class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&data_, bytes_ > 0 ? bytes_ : 1) != cudaSuccess) data_ = nullptr;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* get() const { return data_; }
  bool upload(const void* host) {
    return cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  bool download(void* host) const {
    return cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  // Never zeros: 0xA5 bytes are a small negative float, a negative integer.
  bool poison() { return cudaMemset(data_, 0xA5, bytes_) == cudaSuccess; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class GpuPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = pluginApi();
    ASSERT_NE(api_, nullptr);
    char why[512] = {};
    if (!api_->probe(0, why, sizeof why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
  void TearDown() override {
    for (void* group : groups_) api_->groupDestroy(group, false);
  }

  // A one-rank group on device 0 (with a 1 x 1 grid unless told otherwise); nullptr on failure.
  void* makeGroup(uint64_t capBytes = uint64_t{1} << 30, bool grid = true) {
    GpuGroupSpec spec;
    spec.device = 0;
    spec.worldSize = 1;
    spec.worldRank = 0;
    spec.cscMaxResidualBytes = capBytes;
    char why[512] = {};
    bool ok = api_->uniqueId(spec.worldId, why, sizeof why);
    if (grid) {
      spec.rowSize = spec.colSize = 1;
      ok = ok && api_->uniqueId(spec.rowId, why, sizeof why) &&
           api_->uniqueId(spec.colId, why, sizeof why);
    }
    void* group = nullptr;
    ok = ok && api_->groupPrepare(&spec, &group, why, sizeof why);
    bool connected = ok && api_->groupConnectStart(group, why, sizeof why);
    // One rank: NCCL's nonblocking initialisation finishes on its own; a minute is plenty.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int state = kGpuConnectPending;
    while (connected && state == kGpuConnectPending) {
      state = api_->groupConnectPoll(group, why, sizeof why);
      if (std::chrono::steady_clock::now() > deadline) {
        std::snprintf(why, sizeof why, "NCCL initialisation of one rank took over 60 s");
        break;
      }
    }
    connected = connected && state == kGpuConnectDone;
    if (ok && !connected) api_->groupDestroy(group, true);
    ok = connected;
    EXPECT_TRUE(ok) << why;
    if (!ok) return nullptr;
    groups_.push_back(group);
    return group;
  }

  bool run(void* group, const GpuCall& call, GpuCallRecord* record) {
    char why[512] = {};
    const bool ok = api_->allreduce(group, &call, record, why, sizeof why);
    EXPECT_TRUE(ok) << why;
    return ok;
  }

  const GpuPluginApi* api_ = nullptr;
  std::vector<void*> groups_;
};

template <typename T>
std::vector<T> integerValued(size_t count, int salt) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<T>(static_cast<int64_t>((i * 7919 + salt * 31) % 2001) - 1000);
  }
  return values;
}

TEST_F(GpuPlugin, ExactRingAndTorusReturnTheInputForOneRank) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  auto check = [&](DType dtype, auto zero) {
    using T = decltype(zero);
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}}) {
      const std::vector<T> input = integerValued<T>(count, static_cast<int>(count % 13));
      const size_t bytes = count * sizeof(T);
      DeviceArray send(bytes), recv(bytes);
      ASSERT_NE(send.get(), nullptr);
      ASSERT_NE(recv.get(), nullptr);
      for (RedOp op : {RedOp::kSum, RedOp::kMax}) {
        for (bool torus : {false, true}) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + redOpName(op) +
                         (torus ? " torus" : " ring") + (inPlace ? " in place" : "") + " count " +
                         std::to_string(count));
            ASSERT_TRUE(recv.poison());
            if (inPlace) {
              ASSERT_TRUE(recv.upload(input.data()));
            } else {
              ASSERT_TRUE(send.upload(input.data()));
            }
            GpuCall call;
            call.send = inPlace ? recv.get() : send.get();
            call.recv = recv.get();
            call.count = count;
            call.dtype = dtype;
            call.op = op;
            call.torus = torus;
            GpuCallRecord record;
            record.wireBytes = 12345;
            ASSERT_TRUE(run(group, call, &record));
            std::vector<T> got(count);
            ASSERT_TRUE(recv.download(got.data()));
            EXPECT_EQ(std::memcmp(got.data(), input.data(), bytes), 0);
            EXPECT_EQ(record.wireBytes, 0u);  // one rank sends nothing
            EXPECT_FALSE(record.overflowRedo);
            EXPECT_FALSE(record.sparse);
          }
        }
      }
    }
  };
  check(DType::kFloat32, 0.0f);
  check(DType::kFloat64, 0.0);
  check(DType::kInt32, int32_t{0});
}

// A fused bucket of many tensors of odd sizes, in place and not, ring and torus, exact and fp16
// on the wire (the values are exact in fp16): on one rank every recv must come back as its own
// send (the gather/scatter offsets and the in-place allreduce of the bucket).
TEST_F(GpuPlugin, FusedBucketReturnsEveryTensorForOneRank) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  constexpr size_t kTensors = 37;
  std::vector<std::unique_ptr<DeviceArray>> sends, recvs;
  std::vector<std::vector<float>> inputs;
  std::vector<GpuFusedOp> ops;
  for (size_t t = 0; t < kTensors; ++t) {
    const size_t count = 1 + (t * 7919) % 5000;
    inputs.push_back(integerValued<float>(count, static_cast<int>(t)));
    sends.push_back(std::make_unique<DeviceArray>(count * sizeof(float)));
    recvs.push_back(std::make_unique<DeviceArray>(count * sizeof(float)));
    ASSERT_NE(sends.back()->get(), nullptr);
    ASSERT_NE(recvs.back()->get(), nullptr);
    const bool inPlace = t % 2 == 0;
    ops.push_back({inPlace ? recvs.back()->get() : sends.back()->get(), recvs.back()->get(),
                   count * sizeof(float)});
  }
  for (const auto& [torus, codec] :
       {std::pair{false, WireCodec::kNone}, std::pair{true, WireCodec::kNone},
        std::pair{false, WireCodec::kFp16}, std::pair{true, WireCodec::kFp16}}) {
    SCOPED_TRACE(std::string(torus ? "torus" : "ring") +
                 (codec == WireCodec::kFp16 ? ", fp16" : ", exact"));
    for (size_t t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(recvs[t]->poison());
      ASSERT_TRUE((t % 2 == 0 ? *recvs[t] : *sends[t]).upload(inputs[t].data()));
    }
    GpuFusedCall call;
    call.ops = ops.data();
    call.opCount = ops.size();
    call.dtype = DType::kFloat32;
    call.op = RedOp::kSum;
    call.torus = torus;
    call.codec = codec;
    GpuCallRecord record;
    record.wireBytes = 12345;
    char why[512] = {};
    ASSERT_TRUE(api_->fusedAllreduce(group, &call, &record, why, sizeof why)) << why;
    EXPECT_EQ(record.wireBytes, 0u);
    EXPECT_FALSE(record.overflowRedo);
    for (size_t t = 0; t < kTensors; ++t) {
      std::vector<float> got(inputs[t].size());
      ASSERT_TRUE(recvs[t]->download(got.data()));
      EXPECT_EQ(std::memcmp(got.data(), inputs[t].data(), got.size() * sizeof(float)), 0)
          << "tensor " << t;
    }
  }
}

// A thread with no CUDA context (the shim's fusion thread is one) calls the plugin: afterwards it
// must still have none. Restoring "the current device" instead would make GPU 0's primary
// context current there, and create it in every rank's process.
TEST_F(GpuPlugin, EntriesLeaveAThreadWithoutAContextWithoutOne) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(driver, nullptr) << "the runtime has loaded the driver";
  using GetCurrent = int (*)(void**);
  const auto getCurrent = reinterpret_cast<GetCurrent>(dlsym(driver, "cuCtxGetCurrent"));
  ASSERT_NE(getCurrent, nullptr);
  DeviceArray buffer(1024 * sizeof(float));
  const std::vector<float> input = integerValued<float>(1024, 5);
  ASSERT_TRUE(buffer.upload(input.data()));
  void* before = reinterpret_cast<void*>(uintptr_t{1});
  void* after = reinterpret_cast<void*>(uintptr_t{1});
  bool ok = false;
  char why[512] = {};
  std::thread caller([&] {
    getCurrent(&before);
    GpuCall call;
    call.send = call.recv = buffer.get();
    call.count = input.size();
    GpuCallRecord record;
    ok = api_->allreduce(group, &call, &record, why, sizeof why);
    getCurrent(&after);
  });
  caller.join();
  EXPECT_TRUE(ok) << why;
  EXPECT_EQ(before, nullptr) << "a new thread starts without a context";
  EXPECT_EQ(after, nullptr) << "the plugin left a context current on a thread that had none";
  std::vector<float> got(input.size());
  ASSERT_TRUE(buffer.download(got.data()));
  EXPECT_EQ(std::memcmp(got.data(), input.data(), got.size() * sizeof(float)), 0);
}

TEST_F(GpuPlugin, TorusOnAGroupWithoutAGridFailsWithAReason) {
  void* group = makeGroup(1 << 20, /*grid=*/false);
  ASSERT_NE(group, nullptr);
  DeviceArray buffer(64 * sizeof(float));
  ASSERT_TRUE(buffer.poison());
  GpuCall call;
  call.send = call.recv = buffer.get();
  call.count = 64;
  call.torus = true;
  GpuCallRecord record;
  char why[512] = {};
  EXPECT_FALSE(api_->allreduce(group, &call, &record, why, sizeof why));
  EXPECT_NE(std::string(why).find("grid"), std::string::npos) << why;
  call.torus = false;  // the group is still usable
  EXPECT_TRUE(run(group, call, &record));
}

// Values over fp16's whole range: normals, subnormals, values that underflow to zero.
std::vector<float> codecInput(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 15);
  std::vector<float> values(count);
  for (float& v : values) v = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

std::vector<float> roundTrip(HalfFormat format, const std::vector<float>& values) {
  std::vector<uint16_t> wire(values.size());
  std::vector<float> back(values.size());
  encodeHalf(format, values.data(), 1.0f, wire.data(), values.size());
  decodeHalf(format, wire.data(), back.data(), values.size());
  return back;
}

TEST_F(GpuPlugin, Fp16AndBf16GiveTheInputRoundedTo16Bits) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  for (size_t count : {size_t{7}, size_t{1000003}}) {
    const std::vector<float> input = codecInput(count, static_cast<uint32_t>(count));
    const size_t bytes = count * sizeof(float);
    DeviceArray send(bytes), recv(bytes);
    for (WireCodec codec : {WireCodec::kFp16, WireCodec::kBf16}) {
      const HalfFormat format = codec == WireCodec::kFp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
      const std::vector<float> expected = roundTrip(format, input);
      for (bool prescale : {false, true}) {
        for (bool torus : {false, true}) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(std::string(halfFormatName(format)) + (prescale ? " prescale" : "") +
                         (torus ? " torus" : " ring") + (inPlace ? " in place" : "") + " count " +
                         std::to_string(count));
            ASSERT_TRUE(recv.poison());
            ASSERT_TRUE((inPlace ? recv : send).upload(input.data()));
            GpuCall call;
            call.send = inPlace ? recv.get() : send.get();
            call.recv = recv.get();
            call.count = count;
            call.torus = torus;
            call.codec = codec;
            call.prescale = prescale;
            GpuCallRecord record;
            ASSERT_TRUE(run(group, call, &record));
            std::vector<float> got(count);
            ASSERT_TRUE(recv.download(got.data()));
            EXPECT_EQ(std::memcmp(got.data(), expected.data(), bytes), 0);
            EXPECT_FALSE(record.overflowRedo);
            if (!inPlace) {  // the input is left alone
              std::vector<float> sent(count);
              ASSERT_TRUE(send.download(sent.data()));
              EXPECT_EQ(std::memcmp(sent.data(), input.data(), bytes), 0);
            }
          }
        }
      }
    }
  }
}

TEST_F(GpuPlugin, Fp16OverflowRedoesTheCallExactly) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  const size_t count = 100003;
  std::vector<float> input = codecInput(count, 3);
  input[5] = 1e6f;  // Inf in fp16, finite in bf16
  input[count - 1] = -1e6f;
  const size_t bytes = count * sizeof(float);
  DeviceArray send(bytes), recv(bytes);
  for (bool torus : {false, true}) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(std::string(torus ? "torus" : "ring") + (inPlace ? " in place" : ""));
      ASSERT_TRUE(recv.poison());
      ASSERT_TRUE((inPlace ? recv : send).upload(input.data()));
      GpuCall call;
      call.send = inPlace ? recv.get() : send.get();
      call.recv = recv.get();
      call.count = count;
      call.torus = torus;
      call.codec = WireCodec::kFp16;
      GpuCallRecord record;
      ASSERT_TRUE(run(group, call, &record));
      std::vector<float> got(count);
      ASSERT_TRUE(recv.download(got.data()));
      EXPECT_TRUE(record.overflowRedo);
      EXPECT_EQ(std::memcmp(got.data(), input.data(), bytes), 0);

      // bf16 holds 1e6: no redo, the rounded input.
      ASSERT_TRUE(recv.poison());
      ASSERT_TRUE((inPlace ? recv : send).upload(input.data()));
      call.codec = WireCodec::kBf16;
      record = GpuCallRecord{};
      ASSERT_TRUE(run(group, call, &record));
      ASSERT_TRUE(recv.download(got.data()));
      EXPECT_FALSE(record.overflowRedo);
      const std::vector<float> expected = roundTrip(HalfFormat::kBf16, input);
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), bytes), 0);
    }
  }
}

TEST_F(GpuPlugin, NanInTheInputIsRedoneLikeTheCpuPath) {
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  const size_t count = 1000;
  std::vector<float> input = codecInput(count, 4);
  input[17] = std::numeric_limits<float>::quiet_NaN();
  DeviceArray send(count * sizeof(float)), recv(count * sizeof(float));
  ASSERT_TRUE(send.upload(input.data()));
  ASSERT_TRUE(recv.poison());
  GpuCall call;
  call.send = send.get();
  call.recv = recv.get();
  call.count = count;
  call.codec = WireCodec::kFp16;
  GpuCallRecord record;
  ASSERT_TRUE(run(group, call, &record));
  std::vector<float> got(count);
  ASSERT_TRUE(recv.download(got.data()));
  EXPECT_TRUE(record.overflowRedo);
  for (size_t i = 0; i < count; ++i) {
    if (i == 17) {
      EXPECT_TRUE(std::isnan(got[i]));
    } else {
      EXPECT_EQ(got[i], input[i]) << i;
    }
  }
}

// The CPU reference's collectives for one rank: the values pass through the codec (and are
// redone exactly on Inf/NaN), as the plugin's dense step does with one rank.
class OneRankDense : public CscDense {
 public:
  explicit OneRankDense(WireCodec codec) : codec_(codec) {}
  Status agreeDense(bool wantDense, bool* anyDense) override {
    *anyDense = wantDense;
    return Status::ok();
  }
  Status allreduceNorms(float*, size_t) override { return Status::ok(); }
  Status allreduceValues(const float* packed, float* summed, size_t n) override {
    const std::vector<float> input(packed, packed + n);
    std::vector<float> result = input;
    if (codec_ != WireCodec::kNone) {
      result = roundTrip(codec_ == WireCodec::kFp16 ? HalfFormat::kFp16 : HalfFormat::kBf16, input);
      for (float v : result) {
        if (!std::isfinite(v)) {
          result = input;
          break;
        }
      }
    }
    std::memcpy(summed, result.data(), n * sizeof(float));
    return Status::ok();
  }

 private:
  WireCodec codec_;
};

// Chunk magnitudes that differ (so the selection order matters), the short last chunk the
// largest: its selection exercises the packed length shorter than whole chunks.
std::vector<float> cscInput(size_t count, size_t chunkElements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.5f, 1.0f);
  const size_t chunks = cscChunkCount(count, chunkElements);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t chunk = i / chunkElements;
    const float magnitude = chunk + 1 == chunks ? 1000.0f : float(1 + (chunk * 37) % 11);
    values[i] = (i % 3 == 0 ? -1.0f : 1.0f) * value(rng) * magnitude;
  }
  return values;
}

TEST_F(GpuPlugin, CscMatchesTheCpuCallByCallAndDeliversEverything) {
  const size_t count = 100000;
  const size_t chunkElements = 1024;  // 98 chunks, the last of 672 elements
  const double density = 0.1;         // 10 chunks per call
  const int64_t warmup = 2;
  const size_t chunks = cscChunkCount(count, chunkElements);
  const size_t k = cscSelectedCount(chunks, density);
  ASSERT_EQ(chunks, 98u);
  ASSERT_EQ(k, 10u);
  void* group = makeGroup();
  ASSERT_NE(group, nullptr);
  const size_t bytes = count * sizeof(float);
  DeviceArray send(bytes), recv(bytes);
  uintptr_t variant = 0;
  for (WireCodec codec : {WireCodec::kNone, WireCodec::kFp16}) {
    for (bool inPlace : {false, true}) {
      for (bool torus : {false, true}) {
        SCOPED_TRACE(std::string(codec == WireCodec::kNone ? "fp32" : "fp16") +
                     (inPlace ? " in place" : "") + (torus ? " torus" : " ring"));
        CscResidualStore store(uint64_t{1} << 30);
        CscResidual* entry = store.findOrCreate(0, 1, count);
        ASSERT_NE(entry, nullptr);
        OneRankDense dense(codec);
        CscScratch scratch;
        const CscParams params{density, chunkElements, warmup};
        ++variant;  // a new residual key per variant: each starts its own warm-up
        const std::vector<float> first = cscInput(count, chunkElements, 11);
        std::vector<float> delivered(count, 0.0f);
        const int calls = static_cast<int>(warmup) + 11;  // 98 chunks need 10 sparse calls
        for (int c = 0; c < calls; ++c) {
          SCOPED_TRACE("call " + std::to_string(c));
          std::vector<float> input = c < warmup    ? cscInput(count, chunkElements, 100 + c)
                                     : c == warmup ? first
                                                   : std::vector<float>(count, 0.0f);
          std::vector<float> expected(count);
          CscOutcome outcome;
          ASSERT_TRUE(cscAllreduce(params, entry, input.data(), expected.data(), count, dense,
                                   scratch, &outcome)
                          .isOk());
          ASSERT_TRUE(recv.poison());
          ASSERT_TRUE((inPlace ? recv : send).upload(input.data()));
          GpuCall call;
          call.send = inPlace ? recv.get() : send.get();
          call.recv = recv.get();
          call.count = count;
          call.torus = torus;
          call.codec = codec;
          call.cscDensity = density;
          call.cscChunkElements = chunkElements;
          call.cscWarmupCalls = warmup;
          call.residualKey = 0x1000 + variant;
          GpuCallRecord record;
          ASSERT_TRUE(run(group, call, &record));
          std::vector<float> got(count);
          ASSERT_TRUE(recv.download(got.data()));
          ASSERT_EQ(std::memcmp(got.data(), expected.data(), bytes), 0);
          EXPECT_EQ(record.sparse, c >= warmup);
          EXPECT_EQ(record.chunks, c >= warmup ? chunks : 0u);
          EXPECT_EQ(record.selectedChunks, c >= warmup ? k : 0u);
          EXPECT_FALSE(record.overflowRedo);
          if (c >= warmup) {
            for (size_t i = 0; i < count; ++i) delivered[i] += got[i];
          }
        }
        // Everything the first sparse call put in is delivered, once, exactly (through the
        // codec's rounding for fp16).
        const std::vector<float> wanted =
            codec == WireCodec::kNone ? first : roundTrip(HalfFormat::kFp16, first);
        EXPECT_EQ(std::memcmp(delivered.data(), wanted.data(), bytes), 0);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(entry->data()[i], 0.0f) << i;
      }
    }
  }
}

TEST_F(GpuPlugin, CscBeyondTheResidualCapRunsDense) {
  const size_t count = 5000;
  void* group = makeGroup(count * sizeof(float) - 4);
  ASSERT_NE(group, nullptr);
  const std::vector<float> input = cscInput(count, 256, 5);
  DeviceArray send(count * sizeof(float)), recv(count * sizeof(float));
  ASSERT_TRUE(send.upload(input.data()));
  for (int c = 0; c < 3; ++c) {
    ASSERT_TRUE(recv.poison());
    GpuCall call;
    call.send = send.get();
    call.recv = recv.get();
    call.count = count;
    call.cscDensity = 0.1;
    call.cscChunkElements = 256;
    call.residualKey = reinterpret_cast<uintptr_t>(recv.get());
    GpuCallRecord record;
    ASSERT_TRUE(run(group, call, &record));
    std::vector<float> got(count);
    ASSERT_TRUE(recv.download(got.data()));
    EXPECT_FALSE(record.sparse);
    EXPECT_EQ(got, input);
  }
}

}  // namespace
}  // namespace gfshim

// Exit 77 (ctest's SKIP_RETURN_CODE) when nothing ran but skips: a machine without a GPU.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (failed == 0 && unit.skipped_test_count() > 0 && unit.successful_test_count() == 0) return 77;
  return failed;
}
