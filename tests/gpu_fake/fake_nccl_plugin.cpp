// A stand-in for the GPU plugin libgfshim_cuda.so (src/gpu/gpu_plugin_api.h) on machines without a
// GPU, for the tests of what the shim does around NCCL: the route vote, the distribution of the
// world, row and column unique ids, the two-step setup and its agreed fallback when a rank fails
// or hangs, fused buckets on the NCCL path, and the destruction of the groups. The tests put it
// beside a copy of libgfshim.so, where the shim looks for its plugin, and run with the fake CUDA
// driver (tests/gpu_fake/fake_cuda_driver.c), whose device memory this plugin reads and writes
// through the driver's synchronous copies, as NCCL would on the GPU.
//
// "NCCL" here is a rendezvous in a directory named by the unique id, under FAKE_NCCL_DIR (default
// /dev/shm): a rank joins a communicator by creating joined.<rank> there, and the communicator is
// made once all of its ranks have joined, so the initialisation completes only when every rank
// takes part, as NCCL's does. Initialisation is nonblocking like the real plugin's: start, then
// polls. An allreduce writes this rank's input to c<call>.<rank>, waits for every rank's file of
// that call and reduces them in rank order (exact; the torus runs on the world: the same result).
// fp16/bf16 on the wire is emulated with the CPU codec (encode, sum, decode, the overflow redo);
// CSC calls are refused (the tests of this fake do not run CSC).
//
// Faults, by world rank (each variable names one rank):
//   FAKE_NCCL_FAIL_PREPARE_RANK  groupPrepare fails there
//   FAKE_NCCL_FAIL_START_RANK    groupConnectStart fails there (the rank never joins)
//   FAKE_NCCL_FAIL_POLL_RANK     the rank takes part in every communicator's initialisation, and
//                                its last poll, where it would be done, reports a failure (its
//                                peers finish theirs)
//   FAKE_NCCL_HANG_RANK          the rank never joins and its polls stay pending
//   FAKE_NCCL_FAIL_CALL_RANK     the first blocking allreduce of each group fails there before it
//                                sends anything (its peers wait for it until the deadline)
// Every group's end is logged on stderr ("fake NCCL rank R: group destroyed|aborted ..."), so the
// tests see whether the shim destroyed or aborted it; so is a made group ("connected").
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algo/reducer.h"
#include "compress/half_codec.h"
#include "gpu/gpu_plugin_api.h"

extern "C" {
#include "cuda_test_api.h"
int cuCtxGetCurrent(void** context);
}

namespace {

using gfshim::DType;
using gfshim::GpuCall;
using gfshim::GpuCallRecord;
using gfshim::GpuFusedCall;
using gfshim::GpuGroupSpec;
using gfshim::RedOp;
using gfshim::setWhy;

bool faultAt(const char* variable, int rank) {
  const char* text = std::getenv(variable);
  return text != nullptr && *text != '\0' && std::atoi(text) == rank;
}

std::string rootDirectory() {
  const char* text = std::getenv("FAKE_NCCL_DIR");
  return text != nullptr && *text != '\0' ? text : "/dev/shm";
}

std::string hexOf(const uint8_t* id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (int i = 0; i < 16; ++i) {
    text += kDigits[id[i] >> 4];
    text += kDigits[id[i] & 15];
  }
  return text;
}

bool exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

bool touch(const std::string& path) {
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool writeAll(const std::string& path, const void* data, size_t bytes) {
  const std::string partial = path + ".partial";
  const int fd = open(partial.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return false;
  const char* at = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = write(fd, at, left);
    if (n <= 0) {
      close(fd);
      return false;
    }
    at += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  return rename(partial.c_str(), path.c_str()) == 0;  // visible only when complete
}

bool readAll(const std::string& path, void* data, size_t bytes) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  char* at = static_cast<char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = read(fd, at, left);
    if (n <= 0) break;
    at += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  return left == 0;
}

// One fake communicator: its directory, size and this rank.
struct FakeComm {
  std::string directory;
  int size = 0, rank = 0;
  bool joined = false;

  bool join() {
    mkdir(directory.c_str(), 0700);  // the first rank makes it
    joined = touch(directory + "/joined." + std::to_string(rank));
    return joined;
  }
  bool everyoneJoined() const {
    for (int r = 0; r < size; ++r)
      if (!exists(directory + "/joined." + std::to_string(r))) return false;
    return true;
  }
  // Marks this rank gone; the last rank to leave removes the directory.
  void leave() {
    if (directory.empty() || !exists(directory)) return;
    touch(directory + "/left." + std::to_string(rank));
    for (int r = 0; r < size; ++r)
      if (!exists(directory + "/left." + std::to_string(r))) return;
    if (DIR* listing = opendir(directory.c_str())) {
      while (const dirent* entry = readdir(listing)) {
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
          unlink((directory + "/" + entry->d_name).c_str());
      }
      closedir(listing);
    }
    rmdir(directory.c_str());
  }
};

// The CUDA context of the group's device, current for the scope (the fake driver's copies need
// one, and the fusion thread has none of its own).
class ContextScope {
 public:
  explicit ContextScope(int device) {
    cuCtxGetCurrent(&previous_);
    void* context = nullptr;
    if (cuDevicePrimaryCtxRetain(&context, device) == 0) cuCtxSetCurrent(context);
  }
  ~ContextScope() { cuCtxSetCurrent(previous_); }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  void* previous_ = nullptr;
};

class FakeGroup {
 public:
  explicit FakeGroup(const GpuGroupSpec& spec) : spec_(spec) {
    const std::string root = rootDirectory() + "/gfshim-fake-nccl-";
    world_ = {root + hexOf(spec.worldId), spec.worldSize, spec.worldRank};
    if (spec.rowSize > 0) {
      row_ = {root + hexOf(spec.rowId), spec.rowSize, spec.rowRank};
      column_ = {root + hexOf(spec.colId), spec.colSize, spec.colRank};
    }
  }
  ~FakeGroup() {
    for (FakeComm* comm : {&world_, &row_, &column_}) comm->leave();
  }

  int device() const { return spec_.device; }
  int rank() const { return spec_.worldRank; }
  bool connected() const { return stage_ == kConnected; }
  bool connectStart() {
    if (faultAt("FAKE_NCCL_FAIL_START_RANK", rank())) return false;
    stage_ = kWorld;
    if (faultAt("FAKE_NCCL_HANG_RANK", rank())) return true;
    return world_.join();
  }
  int connectPoll(char* why, size_t whyBytes) {
    if (faultAt("FAKE_NCCL_HANG_RANK", rank())) return gfshim::kGpuConnectPending;
    FakeComm* current = stage_ == kWorld    ? &world_
                        : stage_ == kRow    ? &row_
                        : stage_ == kColumn ? &column_
                                            : nullptr;
    if (current == nullptr)
      return stage_ == kConnected ? gfshim::kGpuConnectDone : gfshim::kGpuConnectFailed;
    if (!current->everyoneJoined()) return gfshim::kGpuConnectPending;
    if (stage_ == kWorld && spec_.rowSize > 0) {
      stage_ = kRow;
      return row_.join() ? gfshim::kGpuConnectPending : gfshim::kGpuConnectFailed;
    }
    if (stage_ == kRow) {
      stage_ = kColumn;
      return column_.join() ? gfshim::kGpuConnectPending : gfshim::kGpuConnectFailed;
    }
    if (faultAt("FAKE_NCCL_FAIL_POLL_RANK", rank())) {
      // Where it would be done: every peer can finish its own initialisation.
      setWhy(why, whyBytes, "fake NCCL: injected asynchronous failure of the initialisation");
      return gfshim::kGpuConnectFailed;
    }
    stage_ = kConnected;
    std::fprintf(stderr, "fake NCCL rank %d: connected (world %d ranks, row %d, column %d)\n",
                 rank(), spec_.worldSize, spec_.rowSize, spec_.colSize);
    return gfshim::kGpuConnectDone;
  }

  // Every rank's `bytes` of this call in rank order, through the files of one call: this rank
  // writes c<call>.<rank>, then reads every rank's.
  bool gatherAll(const char* mine, size_t bytes, std::vector<char>* everyone, char* why,
                 size_t whyBytes) {
    const std::string prefix = world_.directory + "/c" + std::to_string(++exchanges_) + ".";
    if (!writeAll(prefix + std::to_string(world_.rank), mine, bytes)) {
      setWhy(why, whyBytes, "fake NCCL: cannot write %s", prefix.c_str());
      return false;
    }
    everyone->resize(bytes * static_cast<size_t>(world_.size));
    // The call's deadline, as the real plugin's (GpuGroupSpec::timeoutSec; 0: none).
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < world_.size; ++r) {
      const std::string path = prefix + std::to_string(r);
      while (!exists(path)) {
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (spec_.timeoutSec > 0 && waited > spec_.timeoutSec) {
          setWhy(why, whyBytes,
                 "fake NCCL: exchange %llu did not complete within %g s "
                 "(GFSHIM_NCCL_TIMEOUT_SEC): rank %d is missing",
                 exchanges_, spec_.timeoutSec, r);
          return false;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (!readAll(path, everyone->data() + bytes * static_cast<size_t>(r), bytes)) {
        setWhy(why, whyBytes, "fake NCCL: cannot read %s", path.c_str());
        return false;
      }
    }
    // Every rank has written this exchange, so every rank has read the previous one.
    if (exchanges_ > 1) {
      unlink((world_.directory + "/c" + std::to_string(exchanges_ - 1) + "." +
              std::to_string(world_.rank))
                 .c_str());
    }
    return true;
  }

  // values = op over the world of values (count elements, host memory), in rank order.
  bool reduceHost(char* values, size_t count, DType dtype, RedOp op, uint64_t* wireBytes, char* why,
                  size_t whyBytes) {
    const size_t bytes = count * gfshim::dtypeBytes(dtype);
    std::vector<char> everyone;
    if (!gatherAll(values, bytes, &everyone, why, whyBytes)) return false;
    const gfshim::ReduceFn reduceFn = gfshim::cpuReduceFn(dtype, op);
    std::memcpy(values, everyone.data(), bytes);
    for (int r = 1; r < world_.size; ++r)  // out may alias the second input
      reduceFn(everyone.data() + bytes * static_cast<size_t>(r), values, values, count);
    *wireBytes += ringBytes(bytes);
    return true;
  }

  // The float sum of values with 16-bit values on the wire, as the real plugin: encode (times
  // 1/p with prescale), the sum of the 16-bit values (here in float, rounded once to 16 bits),
  // decode (times p); Inf/NaN in the result redoes it exactly from the kept input.
  bool reduceHostLossy(float* values, size_t count, gfshim::WireCodec codec, bool prescale,
                       GpuCallRecord* record, char* why, size_t whyBytes) {
    const gfshim::HalfFormat format =
        codec == gfshim::WireCodec::kBf16 ? gfshim::HalfFormat::kBf16 : gfshim::HalfFormat::kFp16;
    const float ranks = static_cast<float>(world_.size);
    std::vector<float> input(values, values + count);
    std::vector<uint16_t> wire(count);
    gfshim::encodeHalf(format, values, prescale ? 1.0f / ranks : 1.0f, wire.data(), count);
    std::vector<char> everyone;
    const size_t bytes = count * sizeof(uint16_t);
    if (!gatherAll(reinterpret_cast<const char*>(wire.data()), bytes, &everyone, why, whyBytes))
      return false;
    record->wireBytes += ringBytes(bytes);
    std::vector<float> decoded(count), sum(count, 0.0f);
    for (int r = 0; r < world_.size; ++r) {
      gfshim::decodeHalf(
          format,
          reinterpret_cast<const uint16_t*>(everyone.data() + bytes * static_cast<size_t>(r)),
          decoded.data(), count);
      for (size_t i = 0; i < count; ++i) sum[i] += decoded[i];
    }
    gfshim::encodeHalf(format, sum.data(), 1.0f, wire.data(), count);
    gfshim::decodeHalf(format, wire.data(), values, count);
    bool finite = true;
    for (size_t i = 0; i < count; ++i) {
      if (prescale) values[i] *= ranks;
      finite = finite && std::isfinite(values[i]);
    }
    if (finite) return true;
    record->overflowRedo = true;
    std::memcpy(values, input.data(), count * sizeof(float));
    return reduceHost(reinterpret_cast<char*>(values), count, DType::kFloat32, RedOp::kSum,
                      &record->wireBytes, why, whyBytes);
  }

  // One call on `count` elements of device memory (send -> recv), exact or lossy.
  bool reduceDevice(const void* send, void* recv, size_t count, DType dtype, RedOp op,
                    gfshim::WireCodec codec, bool prescale, GpuCallRecord* record, char* why,
                    size_t whyBytes) {
    const size_t bytes = count * gfshim::dtypeBytes(dtype);
    std::vector<char> values(bytes);
    if (bytes > 0 && cuMemcpyDtoH_v2(values.data(), reinterpret_cast<CUdeviceptr>(send), bytes)) {
      setWhy(why, whyBytes, "fake NCCL: cannot read the send buffer");
      return false;
    }
    const bool ok =
        codec == gfshim::WireCodec::kNone
            ? reduceHost(values.data(), count, dtype, op, &record->wireBytes, why, whyBytes)
            : reduceHostLossy(reinterpret_cast<float*>(values.data()), count, codec, prescale,
                              record, why, whyBytes);
    if (!ok) return false;
    if (bytes > 0 && cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(recv), values.data(), bytes)) {
      setWhy(why, whyBytes, "fake NCCL: cannot write the receive buffer");
      return false;
    }
    if (codec != gfshim::WireCodec::kNone) ++codecCalls;
    return true;
  }

  // NCCL's ring: each rank sends 2(p-1)/p of the payload.
  uint64_t ringBytes(uint64_t bytes) const {
    const uint64_t p = static_cast<uint64_t>(spec_.worldSize);
    return p <= 1 ? 0 : 2 * (bytes / p * (p - 1) + bytes % p * (p - 1) / p);
  }

  // What the group did, for its destruction's log line.
  unsigned long long calls = 0, fusedCalls = 0, codecCalls = 0;

 private:
  enum Stage { kPrepared, kWorld, kRow, kColumn, kConnected };
  GpuGroupSpec spec_;
  FakeComm world_, row_, column_;
  Stage stage_ = kPrepared;
  unsigned long long exchanges_ = 0;
};

bool probe(int device, char* why, size_t whyBytes) noexcept {
  if (device < 0) {
    setWhy(why, whyBytes, "fake NCCL: no device %d", device);
    return false;
  }
  return true;
}

bool uniqueId(uint8_t id[gfshim::kNcclUniqueIdBytes], char* why, size_t whyBytes) noexcept {
  const int fd = open("/dev/urandom", O_RDONLY);
  const bool ok = fd >= 0 && read(fd, id, gfshim::kNcclUniqueIdBytes) ==
                                 static_cast<ssize_t>(gfshim::kNcclUniqueIdBytes);
  if (fd >= 0) close(fd);
  if (!ok) setWhy(why, whyBytes, "fake NCCL: no random id");
  return ok;
}

bool groupPrepare(const GpuGroupSpec* spec, void** group, char* why, size_t whyBytes) noexcept {
  *group = nullptr;
  if (faultAt("FAKE_NCCL_FAIL_PREPARE_RANK", spec->worldRank)) {
    setWhy(why, whyBytes, "fake NCCL: injected preparation failure");
    return false;
  }
  *group = new FakeGroup(*spec);
  return true;
}

bool groupConnectStart(void* group, char* why, size_t whyBytes) noexcept {
  if (static_cast<FakeGroup*>(group)->connectStart()) return true;
  setWhy(why, whyBytes, "fake NCCL: injected failure to start the initialisation");
  return false;
}

int groupConnectPoll(void* group, char* why, size_t whyBytes) noexcept {
  return static_cast<FakeGroup*>(group)->connectPoll(why, whyBytes);
}

void groupDestroy(void* group, bool abort) noexcept {
  if (group == nullptr) return;
  auto* made = static_cast<FakeGroup*>(group);
  std::fprintf(stderr,
               "fake NCCL rank %d: group %s (%s), %llu calls, %llu fused, %llu with 16 bits on "
               "the wire\n",
               made->rank(), abort ? "aborted" : "destroyed",
               made->connected() ? "connected" : "not connected", made->calls, made->fusedCalls,
               made->codecCalls);
  delete made;
}

bool supports(DType dtype, RedOp op) noexcept { return gfshim::cpuReduceFn(dtype, op) != nullptr; }

bool allreduce(void* group, const GpuCall* call, GpuCallRecord* record, char* why,
               size_t whyBytes) noexcept {
  auto* made = static_cast<FakeGroup*>(group);
  *record = GpuCallRecord{};
  if (call->cscDensity > 0) {
    setWhy(why, whyBytes, "fake NCCL: CSC is not faked");
    return false;
  }
  ContextScope context(made->device());
  if (++made->calls == 1 && faultAt("FAKE_NCCL_FAIL_CALL_RANK", made->rank())) {
    setWhy(why, whyBytes, "fake NCCL: injected failure of a call before it sent anything");
    return false;
  }
  return made->reduceDevice(call->send, call->recv, call->count, call->dtype, call->op, call->codec,
                            call->prescale, record, why, whyBytes);
}

// The bucket gathered into one device buffer, one reduction there, scattered back.
bool fusedAllreduce(void* group, const GpuFusedCall* call, GpuCallRecord* record, char* why,
                    size_t whyBytes) noexcept {
  auto* made = static_cast<FakeGroup*>(group);
  *record = GpuCallRecord{};
  ContextScope context(made->device());
  ++made->fusedCalls;
  uint64_t total = 0;
  for (size_t i = 0; i < call->opCount; ++i) total += call->ops[i].bytes;
  CUdeviceptr packed = 0;
  if (cuMemAlloc_v2(&packed, total > 0 ? total : 1) != 0) {
    setWhy(why, whyBytes, "fake NCCL: no device memory for a bucket");
    return false;
  }
  std::vector<char> staging(total);
  uint64_t offset = 0;
  bool ok = true;
  for (size_t i = 0; i < call->opCount && ok; ++i) {
    ok = cuMemcpyDtoH_v2(staging.data() + offset, reinterpret_cast<CUdeviceptr>(call->ops[i].send),
                         call->ops[i].bytes) == 0;
    offset += call->ops[i].bytes;
  }
  ok = ok && cuMemcpyHtoD_v2(packed, staging.data(), total) == 0;
  if (!ok) setWhy(why, whyBytes, "fake NCCL: cannot gather the bucket");
  void* bucket = reinterpret_cast<void*>(packed);
  ok =
      ok && made->reduceDevice(bucket, bucket, total / gfshim::dtypeBytes(call->dtype), call->dtype,
                               call->op, call->codec, call->prescale, record, why, whyBytes);
  if (ok && cuMemcpyDtoH_v2(staging.data(), packed, total) != 0) {
    setWhy(why, whyBytes, "fake NCCL: cannot read the reduced bucket");
    ok = false;
  }
  offset = 0;
  for (size_t i = 0; i < call->opCount && ok; ++i) {
    ok = cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(call->ops[i].recv), staging.data() + offset,
                         call->ops[i].bytes) == 0;
    offset += call->ops[i].bytes;
    if (!ok) setWhy(why, whyBytes, "fake NCCL: cannot scatter the bucket");
  }
  cuMemFree_v2(packed);
  return ok;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const gfshim::GpuPluginApi*
gfshim_gpu_plugin_api() {
  static const gfshim::GpuPluginApi api = {
      gfshim::kGpuPluginAbiVersion,
      probe,
      uniqueId,
      groupPrepare,
      groupConnectStart,
      groupConnectPoll,
      groupDestroy,
      supports,
      allreduce,
      fusedAllreduce,
  };
  return &api;
}
