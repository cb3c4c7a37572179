// The shared-memory collectives of the fake NCCL (shm_collectives.h), between forked processes.
// Each test forks one child per rank; a child opens the group of a key the parent drew, runs the
// collectives on inputs that are a function of (rank, index), checks its results against a
// reference reduced in rank order (so equal bits mean every rank got the same bits) and exits 0
// on success. Receive buffers start as 0xA5 bytes with a guard after them, so a collective that
// writes nothing, or too much, fails.
#include "shm_collectives.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "compress/half_codec.h"

namespace gfshim::emulated {
namespace {

using Bytes = std::vector<uint8_t>;
using Key = std::array<uint8_t, 16>;
using Clock = std::chrono::steady_clock;

constexpr uint8_t kPoison = 0xA5;
constexpr size_t kGuardBytes = 64;

constexpr ShmType kAllTypes[] = {
    ShmType::kInt8,   ShmType::kUInt8,   ShmType::kInt32,    ShmType::kUInt32,  ShmType::kInt64,
    ShmType::kUInt64, ShmType::kFloat16, ShmType::kBfloat16, ShmType::kFloat32, ShmType::kFloat64};
constexpr ShmOp kAllOps[] = {ShmOp::kSum, ShmOp::kProd, ShmOp::kMax, ShmOp::kMin};

#define CHILD_CHECK(condition)                                                                \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: pid %d: check failed: %s\n", __FILE__, __LINE__, getpid(), \
                   #condition);                                                               \
      return false;                                                                           \
    }                                                                                         \
  } while (0)

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Key randomKey() {
  static uint64_t counter = 0;
  std::random_device device;
  uint64_t seed = (static_cast<uint64_t>(device()) << 32) ^ device() ^
                  static_cast<uint64_t>(getpid()) << 16 ^
                  static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ ++counter;
  Key key;
  for (size_t i = 0; i < key.size(); ++i) {
    seed = mix(seed);
    key[i] = static_cast<uint8_t>(seed);
  }
  return key;
}

std::string nameOf(const Key& key) { return ShmGroup::segmentName(key.data(), key.size()); }

// Whether no segment of that name exists.
bool segmentGone(const std::string& name) {
  errno = 0;
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) {
    close(fd);
    return false;
  }
  return errno == ENOENT;
}

// Forks `ranks` children running body(rank) and expects each to exit with status 0. Once one
// fails, the others (likely waiting for it) are killed; a child that hangs is ended by SIGALRM.
void runRanks(int ranks, const std::function<bool(int rank)>& body) {
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      bool ok = false;
      try {
        ok = body(rank);
      } catch (...) {
        std::fprintf(stderr, "rank %d: exception\n", rank);
      }
      std::fflush(nullptr);
      _exit(ok ? 0 : 1);
    }
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      break;
    }
    children.push_back(pid);
  }
  std::vector<bool> reaped(children.size(), false), killed(children.size(), false);
  size_t left = children.size();
  bool failed = children.size() < static_cast<size_t>(ranks);
  while (left > 0) {
    for (size_t rank = 0; rank < children.size(); ++rank) {
      int status = 0;
      if (reaped[rank] || waitpid(children[rank], &status, WNOHANG) != children[rank]) continue;
      reaped[rank] = true;
      --left;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (killed[rank]) continue;  // the failure is the rank that made us kill it
      ADD_FAILURE() << "rank " << rank << " of " << ranks << ": "
                    << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                            : "exit " + std::to_string(WEXITSTATUS(status)));
      failed = true;
    }
    if (failed) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (!reaped[rank] && !killed[rank]) {
          kill(children[rank], SIGKILL);
          killed[rank] = true;
        }
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Opens the group and waits until every rank has; its name is then gone from /dev/shm.
std::unique_ptr<ShmGroup> openJoined(const Key& key, int ranks, int rank) {
  std::string why;
  std::unique_ptr<ShmGroup> group = ShmGroup::open(key.data(), key.size(), ranks, rank, &why);
  if (group == nullptr) {
    std::fprintf(stderr, "rank %d: open failed: %s\n", rank, why.c_str());
    return nullptr;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!group->allJoined()) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "rank %d: the others never joined\n", rank);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!segmentGone(nameOf(key))) {
    std::fprintf(stderr, "rank %d: %s still exists after allJoined\n", rank, nameOf(key).c_str());
    return nullptr;
  }
  return group;
}

// Memory shared by the parent and its children, for signals between them.
struct SharedFlags {
  std::atomic<int64_t> abortedAtNanos;
  std::atomic<int> done;
};

SharedFlags* mapSharedFlags() {
  void* memory =
      mmap(nullptr, sizeof(SharedFlags), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : static_cast<SharedFlags*>(memory);  // zeroed
}

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// ---- Inputs and references.

uint16_t toHalf(HalfFormat format, float value) {
  uint16_t bits = 0;
  encodeHalf(format, &value, 1.0f, &bits, 1);
  return bits;
}

float fromHalf(HalfFormat format, uint16_t bits) {
  float value = 0;
  decodeHalf(format, &bits, &value, 1);
  return value;
}

HalfFormat formatOf(ShmType type) {
  return type == ShmType::kBfloat16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
}

template <typename T>
void put(Bytes* bytes, size_t i, T value) {
  std::memcpy(bytes->data() + i * sizeof(T), &value, sizeof(T));
}

// Rank `rank`'s `count` input elements. Floats have mixed magnitudes and signs so that sums need
// rounding and depend on their order; the element at index 5 mod 101 of rank nanRank is a NaN.
Bytes makeInput(ShmType type, int rank, size_t count, uint64_t salt, int nanRank) {
  Bytes bytes(count * shmTypeBytes(type));
  for (size_t i = 0; i < count; ++i) {
    const uint64_t v = mix(salt * 0x100000001ull + static_cast<uint64_t>(rank) * 1000003 + i);
    const bool nan = rank == nanRank && i % 101 == 5;
    const float magnitude = static_cast<float>(static_cast<int>(v % 20001) - 10000) / 7.0f *
                            static_cast<float>(1 << ((v >> 20) % 8));
    // [1, 2) with a full fp16 mantissa, times 1, 2 or 4, either sign: products stay finite.
    const float nearOne = (1.0f + static_cast<float>((v >> 8) % 1024) / 1024.0f) *
                          static_cast<float>(1 << ((v >> 30) % 3)) * ((v >> 40) % 2 ? -1.0f : 1.0f);
    switch (type) {
      case ShmType::kInt8:
        put(&bytes, i, static_cast<int8_t>(v));
        break;
      case ShmType::kUInt8:
        put(&bytes, i, static_cast<uint8_t>(v));
        break;
      case ShmType::kInt32:
        put(&bytes, i, static_cast<int32_t>(v));
        break;
      case ShmType::kUInt32:
        put(&bytes, i, static_cast<uint32_t>(v));
        break;
      case ShmType::kInt64:
        put(&bytes, i, static_cast<int64_t>(v));
        break;
      case ShmType::kUInt64:
        put(&bytes, i, v);
        break;
      case ShmType::kFloat16:
      case ShmType::kBfloat16:
        put(&bytes, i,
            toHalf(formatOf(type), nan ? std::numeric_limits<float>::quiet_NaN() : nearOne));
        break;
      case ShmType::kFloat32:
        put(&bytes, i, nan ? std::numeric_limits<float>::quiet_NaN() : magnitude);
        break;
      case ShmType::kFloat64:
        put(&bytes, i,
            nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(magnitude) / 3.0);
        break;
    }
  }
  return bytes;
}

std::vector<Bytes> allInputs(ShmType type, int ranks, size_t count, uint64_t salt) {
  std::vector<Bytes> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(makeInput(type, r, count, salt, ranks > 1));
  return inputs;
}

// a op b: integers wrap around, MAX/MIN as the library's (x > y ? x : y, x < y ? x : y).
template <typename T>
T combine(T a, T b, ShmOp op) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ShmOp::kSum:
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case ShmOp::kProd:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      default:
        break;
    }
  } else {
    switch (op) {
      case ShmOp::kSum:
        return a + b;
      case ShmOp::kProd:
        return a * b;
      default:
        break;
    }
  }
  return op == ShmOp::kMax ? (a > b ? a : b) : (a < b ? a : b);
}

template <typename T>
void reduceTyped(ShmType type, ShmOp op, const std::vector<const uint8_t*>& order, size_t count,
                 uint8_t* out) {
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, order[0] + i * sizeof(T), sizeof(T));
    for (size_t k = 1; k < order.size(); ++k) {
      T value;
      std::memcpy(&value, order[k] + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, uint16_t>) {
        const HalfFormat format = formatOf(type);
        acc = toHalf(format, combine(fromHalf(format, acc), fromHalf(format, value), op));
      } else {
        acc = combine(acc, value, op);
      }
    }
    std::memcpy(out + i * sizeof(T), &acc, sizeof(T));
  }
}

// Elements [begin, begin + count) of every input reduced in rank order (or its reverse).
Bytes reduceReference(ShmType type, ShmOp op, const std::vector<Bytes>& inputs, size_t begin,
                      size_t count, bool reverse = false) {
  const size_t bytes = shmTypeBytes(type);
  std::vector<const uint8_t*> order;
  for (const Bytes& input : inputs) order.push_back(input.data() + begin * bytes);
  if (reverse) std::reverse(order.begin(), order.end());
  Bytes out(count * bytes);
  switch (type) {
    case ShmType::kInt8:
      reduceTyped<int8_t>(type, op, order, count, out.data());
      break;
    case ShmType::kUInt8:
      reduceTyped<uint8_t>(type, op, order, count, out.data());
      break;
    case ShmType::kInt32:
      reduceTyped<int32_t>(type, op, order, count, out.data());
      break;
    case ShmType::kUInt32:
      reduceTyped<uint32_t>(type, op, order, count, out.data());
      break;
    case ShmType::kInt64:
      reduceTyped<int64_t>(type, op, order, count, out.data());
      break;
    case ShmType::kUInt64:
      reduceTyped<uint64_t>(type, op, order, count, out.data());
      break;
    case ShmType::kFloat16:
    case ShmType::kBfloat16:
      reduceTyped<uint16_t>(type, op, order, count, out.data());
      break;
    case ShmType::kFloat32:
      reduceTyped<float>(type, op, order, count, out.data());
      break;
    case ShmType::kFloat64:
      reduceTyped<double>(type, op, order, count, out.data());
      break;
  }
  return out;
}

Bytes poisoned(size_t bytes) { return Bytes(bytes + kGuardBytes, kPoison); }

// got[0, want.size()) == want and the guard after it untouched.
bool sameBytes(const char* what, const Bytes& got, const Bytes& want, size_t elementBytes) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      std::fprintf(stderr, "pid %d: %s: element %zu differs (byte %zu: %02x, want %02x)\n",
                   getpid(), what, i / elementBytes, i, got[i], want[i]);
      return false;
    }
  }
  for (size_t i = want.size(); i < got.size(); ++i) {
    if (got[i] != kPoison) {
      std::fprintf(stderr, "pid %d: %s: wrote past its end (byte %zu)\n", getpid(), what, i);
      return false;
    }
  }
  return true;
}

std::string describe(const char* collective, ShmType type, int op, size_t count, bool inPlace) {
  return std::string(collective) + " type " + std::to_string(static_cast<int>(type)) + " op " +
         std::to_string(op) + " count " + std::to_string(count) + (inPlace ? " in place" : "");
}

uint64_t hashOf(const Bytes& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (uint8_t byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

// Whether every rank holds the same bytes, compared through an allGather of their hashes.
bool sameOnEveryRank(ShmGroup& group, const Bytes& bytes) {
  const uint64_t hash = hashOf(bytes);
  std::vector<uint64_t> hashes(static_cast<size_t>(group.ranks()), 0);
  CHILD_CHECK(group.allGather(&hash, hashes.data(), 1, ShmType::kUInt64) == ShmResult::kOk);
  for (uint64_t other : hashes) CHILD_CHECK(other == hash);
  return true;
}

bool checkAllReduce(ShmGroup& group, ShmType type, ShmOp op, size_t count, uint64_t salt,
                    bool inPlace, bool compareRanks = false) {
  const size_t bytes = shmTypeBytes(type);
  const std::vector<Bytes> inputs = allInputs(type, group.ranks(), count, salt);
  const Bytes want = reduceReference(type, op, inputs, 0, count);
  const Bytes& mine = inputs[static_cast<size_t>(group.rank())];
  Bytes recv = poisoned(count * bytes);
  ShmResult result;
  if (inPlace) {
    std::copy(mine.begin(), mine.end(), recv.begin());
    result = group.allReduce(recv.data(), recv.data(), count, type, op);
  } else {
    result = group.allReduce(mine.data(), recv.data(), count, type, op);
  }
  const std::string what = describe("allReduce", type, static_cast<int>(op), count, inPlace);
  if (result != ShmResult::kOk) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), shmResultName(result));
    return false;
  }
  if (!sameBytes(what.c_str(), recv, want, bytes)) return false;
  return !compareRanks || sameOnEveryRank(group, Bytes(recv.begin(), recv.end() - kGuardBytes));
}

bool checkReduceScatter(ShmGroup& group, ShmType type, ShmOp op, size_t recvCount, uint64_t salt,
                        bool inPlace) {
  const size_t bytes = shmTypeBytes(type);
  const size_t ranks = static_cast<size_t>(group.ranks());
  const size_t rank = static_cast<size_t>(group.rank());
  const std::vector<Bytes> inputs = allInputs(type, group.ranks(), ranks * recvCount, salt);
  const Bytes want = reduceReference(type, op, inputs, rank * recvCount, recvCount);
  const std::string what =
      describe("reduceScatter", type, static_cast<int>(op), recvCount, inPlace);
  ShmResult result;
  Bytes recv;
  if (inPlace) {
    Bytes buffer = poisoned(ranks * recvCount * bytes);
    std::copy(inputs[rank].begin(), inputs[rank].end(), buffer.begin());
    uint8_t* block = buffer.data() + rank * recvCount * bytes;
    result = group.reduceScatter(buffer.data(), block, recvCount, type, op);
    recv.assign(block, block + recvCount * bytes);
    recv.insert(recv.end(), kGuardBytes, kPoison);
  } else {
    recv = poisoned(recvCount * bytes);
    result = group.reduceScatter(inputs[rank].data(), recv.data(), recvCount, type, op);
  }
  if (result != ShmResult::kOk) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), shmResultName(result));
    return false;
  }
  return sameBytes(what.c_str(), recv, want, bytes);
}

bool checkAllGather(ShmGroup& group, ShmType type, size_t sendCount, uint64_t salt, bool inPlace) {
  const size_t bytes = shmTypeBytes(type);
  const size_t ranks = static_cast<size_t>(group.ranks());
  const size_t rank = static_cast<size_t>(group.rank());
  const std::vector<Bytes> inputs = allInputs(type, group.ranks(), sendCount, salt);
  Bytes want;
  for (const Bytes& input : inputs) want.insert(want.end(), input.begin(), input.end());
  Bytes recv = poisoned(ranks * sendCount * bytes);
  ShmResult result;
  if (inPlace) {
    uint8_t* block = recv.data() + rank * sendCount * bytes;
    std::copy(inputs[rank].begin(), inputs[rank].end(), block);
    result = group.allGather(block, recv.data(), sendCount, type);
  } else {
    result = group.allGather(inputs[rank].data(), recv.data(), sendCount, type);
  }
  const std::string what = describe("allGather", type, -1, sendCount, inPlace);
  if (result != ShmResult::kOk) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), shmResultName(result));
    return false;
  }
  return sameBytes(what.c_str(), recv, want, bytes);
}

// ---- Tests.

TEST(ShmCollectives, TypeSizesAndResultNames) {
  EXPECT_EQ(shmTypeBytes(ShmType::kInt8), 1u);
  EXPECT_EQ(shmTypeBytes(ShmType::kUInt8), 1u);
  EXPECT_EQ(shmTypeBytes(ShmType::kFloat16), 2u);
  EXPECT_EQ(shmTypeBytes(ShmType::kBfloat16), 2u);
  EXPECT_EQ(shmTypeBytes(ShmType::kInt32), 4u);
  EXPECT_EQ(shmTypeBytes(ShmType::kUInt32), 4u);
  EXPECT_EQ(shmTypeBytes(ShmType::kFloat32), 4u);
  EXPECT_EQ(shmTypeBytes(ShmType::kInt64), 8u);
  EXPECT_EQ(shmTypeBytes(ShmType::kUInt64), 8u);
  EXPECT_EQ(shmTypeBytes(ShmType::kFloat64), 8u);
  EXPECT_EQ(shmTypeBytes(static_cast<ShmType>(77)), 0u);
  EXPECT_STREQ(shmResultName(ShmResult::kOk), "ok");
  EXPECT_STREQ(shmResultName(ShmResult::kAborted), "aborted by a rank");
  EXPECT_STREQ(shmResultName(ShmResult::kTimedOut), "timed out waiting for a peer");
  EXPECT_STREQ(shmResultName(ShmResult::kError), "error");
}

TEST(ShmCollectives, SegmentNames) {
  const uint8_t key[20] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 1,
                           2,    3,    4,    5,    6,    255,  9,    9,    9, 9};
  EXPECT_EQ(ShmGroup::segmentName(key, 16), "/gfshim-fake-nccl-0123456789abcdef00010203040506ff");
  EXPECT_EQ(ShmGroup::segmentName(key, 2), "/gfshim-fake-nccl-0123");
  // A longer key adds a hash of all of it, so keys differing after byte 16 differ.
  uint8_t other[20];
  std::memcpy(other, key, sizeof(key));
  other[19] = 8;
  EXPECT_NE(ShmGroup::segmentName(key, 20), ShmGroup::segmentName(other, 20));
  EXPECT_EQ(ShmGroup::segmentName(key, 20).rfind(ShmGroup::segmentName(key, 16) + "-", 0), 0u);
}

TEST(ShmCollectives, OpenRejectsBadArguments) {
  const Key key = randomKey();
  const std::pair<int, int> bad[] = {{0, 0}, {-1, 0}, {2, 2}, {2, -1}, {1, 1}};
  for (const auto& [ranks, rank] : bad) {
    std::string why;
    EXPECT_EQ(ShmGroup::open(key.data(), key.size(), ranks, rank, &why), nullptr)
        << ranks << " ranks, rank " << rank;
    EXPECT_FALSE(why.empty());
  }
  std::string why;
  EXPECT_EQ(ShmGroup::open(nullptr, 0, 1, 0, &why), nullptr);
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(ShmGroup::open(key.data(), 0, 1, 0, nullptr), nullptr);
  EXPECT_TRUE(segmentGone(nameOf(key)));
}

TEST(ShmCollectives, OpenRefusesAnotherGeometryAndLeavesNoName) {
  const Key key = randomKey();
  std::string why;
  std::unique_ptr<ShmGroup> first = ShmGroup::open(key.data(), key.size(), 2, 0, &why);
  ASSERT_NE(first, nullptr) << why;
  EXPECT_EQ(first->ranks(), 2);
  EXPECT_EQ(first->rank(), 0);
  EXPECT_FALSE(first->allJoined());
  EXPECT_FALSE(segmentGone(nameOf(key)));
  // Another number of ranks for the same key: refused, and the segment stays for the others.
  EXPECT_EQ(ShmGroup::open(key.data(), key.size(), 3, 1, &why), nullptr);
  EXPECT_NE(why.find("ranks"), std::string::npos) << why;
  EXPECT_FALSE(segmentGone(nameOf(key)));
  // A group destroyed before every rank joined unlinks the name too.
  first.reset();
  EXPECT_TRUE(segmentGone(nameOf(key)));
}

TEST(ShmCollectives, NoSegmentLeftOnceAllJoined) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key key = randomKey();
    runRanks(ranks, [&](int rank) {
      std::unique_ptr<ShmGroup> group = openJoined(key, ranks, rank);  // checks segmentGone
      CHILD_CHECK(group != nullptr);
      CHILD_CHECK(group->allJoined());  // again: still true, nothing to unlink
      // The mapping outlives the name.
      return checkAllReduce(*group, ShmType::kInt32, ShmOp::kSum, 5, 1, false);
    });
    EXPECT_TRUE(segmentGone(nameOf(key))) << ranks << " ranks";
  }
}

TEST(ShmCollectives, AllReduceEveryTypeAndOp) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key key = randomKey();
    runRanks(ranks, [&](int rank) {
      std::unique_ptr<ShmGroup> group = openJoined(key, ranks, rank);
      CHILD_CHECK(group != nullptr);
      uint64_t salt = 0;
      for (ShmType type : kAllTypes) {
        for (ShmOp op : kAllOps) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1009}}) {
            CHILD_CHECK(checkAllReduce(*group, type, op, count, ++salt, false, true));
          }
        }
      }
      return true;
    });
  }
}

// The reference itself: with 3 or more ranks, floating-point sums in another order differ, so the
// bitwise comparisons above would see a reduction out of rank order.
TEST(ShmCollectives, ReferenceDependsOnRankOrder) {
  for (ShmType type :
       {ShmType::kFloat16, ShmType::kBfloat16, ShmType::kFloat32, ShmType::kFloat64}) {
    for (int ranks = 3; ranks <= 4; ++ranks) {
      const std::vector<Bytes> inputs = allInputs(type, ranks, 1009, 99);
      EXPECT_NE(reduceReference(type, ShmOp::kSum, inputs, 0, 1009),
                reduceReference(type, ShmOp::kSum, inputs, 0, 1009, true))
          << "type " << static_cast<int>(type) << ", " << ranks << " ranks";
    }
  }
}

TEST(ShmCollectives, InPlace) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key key = randomKey();
    runRanks(ranks, [&](int rank) {
      std::unique_ptr<ShmGroup> group = openJoined(key, ranks, rank);
      CHILD_CHECK(group != nullptr);
      uint64_t salt = 100;
      for (size_t count : {size_t{1}, size_t{1013}}) {
        CHILD_CHECK(checkAllReduce(*group, ShmType::kFloat32, ShmOp::kSum, count, ++salt, true));
        CHILD_CHECK(checkAllReduce(*group, ShmType::kInt64, ShmOp::kMax, count, ++salt, true));
        CHILD_CHECK(checkAllReduce(*group, ShmType::kBfloat16, ShmOp::kSum, count, ++salt, true));
        CHILD_CHECK(
            checkReduceScatter(*group, ShmType::kFloat16, ShmOp::kSum, count, ++salt, true));
        CHILD_CHECK(
            checkReduceScatter(*group, ShmType::kUInt32, ShmOp::kProd, count, ++salt, true));
        CHILD_CHECK(checkAllGather(*group, ShmType::kFloat64, count, ++salt, true));
        CHILD_CHECK(checkAllGather(*group, ShmType::kInt8, count, ++salt, true));
      }
      return true;
    });
  }
}

TEST(ShmCollectives, ReduceScatterAndAllGatherSizes) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key key = randomKey();
    runRanks(ranks, [&](int rank) {
      std::unique_ptr<ShmGroup> group = openJoined(key, ranks, rank);
      CHILD_CHECK(group != nullptr);
      uint64_t salt = 200;
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{997}}) {
        CHILD_CHECK(
            checkReduceScatter(*group, ShmType::kFloat32, ShmOp::kSum, count, ++salt, false));
        CHILD_CHECK(checkReduceScatter(*group, ShmType::kInt8, ShmOp::kProd, count, ++salt, false));
        CHILD_CHECK(
            checkReduceScatter(*group, ShmType::kFloat16, ShmOp::kMax, count, ++salt, false));
        CHILD_CHECK(
            checkReduceScatter(*group, ShmType::kUInt64, ShmOp::kMin, count, ++salt, false));
        CHILD_CHECK(checkAllGather(*group, ShmType::kInt8, count, ++salt, false));
        CHILD_CHECK(checkAllGather(*group, ShmType::kBfloat16, count, ++salt, false));
        CHILD_CHECK(checkAllGather(*group, ShmType::kFloat64, count, ++salt, false));
      }
      return true;
    });
  }
}

// Calls larger than a slot run in pieces whose boundaries do not fall on the blocks' (slots of
// 4096 bytes, and of 5000 bytes, which become 4992).
TEST(ShmCollectives, CallsLargerThanASlot) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key key = randomKey();
    const Key key5000 = randomKey();
    runRanks(ranks, [&](int rank) {
      setenv("FAKE_NCCL_SLOT_BYTES", "4096", 1);
      std::unique_ptr<ShmGroup> group = openJoined(key, ranks, rank);
      CHILD_CHECK(group != nullptr);
      setenv("FAKE_NCCL_SLOT_BYTES", "5000", 1);
      std::unique_ptr<ShmGroup> group5000 = openJoined(key5000, ranks, rank);
      CHILD_CHECK(group5000 != nullptr);
      uint64_t salt = 300;
      for (ShmGroup* g : {group.get(), group5000.get()}) {
        for (bool inPlace : {false, true}) {
          CHILD_CHECK(checkAllReduce(*g, ShmType::kFloat32, ShmOp::kSum, 20011, ++salt, inPlace));
          CHILD_CHECK(checkAllReduce(*g, ShmType::kFloat16, ShmOp::kProd, 6007, ++salt, inPlace));
          CHILD_CHECK(checkAllReduce(*g, ShmType::kInt64, ShmOp::kMin, 1531, ++salt, inPlace));
          CHILD_CHECK(
              checkReduceScatter(*g, ShmType::kFloat64, ShmOp::kSum, 1531, ++salt, inPlace));
          CHILD_CHECK(checkReduceScatter(*g, ShmType::kUInt8, ShmOp::kMax, 5003, ++salt, inPlace));
          CHILD_CHECK(checkAllGather(*g, ShmType::kInt32, 3001, ++salt, inPlace));
          CHILD_CHECK(checkAllGather(*g, ShmType::kBfloat16, 4999, ++salt, inPlace));
        }
      }
      return true;
    });
  }
}

TEST(ShmCollectives, TwoGroupsOnTwoThreads) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const Key keys[2] = {randomKey(), randomKey()};
    runRanks(ranks, [&](int rank) {
      std::unique_ptr<ShmGroup> groups[2];
      for (int g = 0; g < 2; ++g) {
        groups[g] = openJoined(keys[g], ranks, rank);
        CHILD_CHECK(groups[g] != nullptr);
      }
      std::atomic<bool> ok[2] = {{false}, {false}};
      auto body = [&](int g) {
        ShmGroup& group = *groups[g];
        const uint64_t base = 1000 * static_cast<uint64_t>(g + 1);
        for (uint64_t i = 0; i < 30; ++i) {
          if (!checkAllReduce(group, ShmType::kFloat32, ShmOp::kSum, 257 + i, base + 3 * i,
                              false) ||
              !checkReduceScatter(group, ShmType::kInt64, ShmOp::kSum, 17 + i, base + 3 * i + 1,
                                  false) ||
              !checkAllGather(group, ShmType::kUInt8, 33 + i, base + 3 * i + 2, false)) {
            return;
          }
        }
        ok[g] = true;
      };
      std::thread other(body, 1);
      body(0);
      other.join();
      CHILD_CHECK(ok[0] && ok[1]);
      return true;
    });
  }
}

TEST(ShmCollectives, AbortWakesWaitingPeers) {
  const Key key = randomKey();
  SharedFlags* flags = mapSharedFlags();
  ASSERT_NE(flags, nullptr);
  runRanks(3, [&](int rank) {
    std::unique_ptr<ShmGroup> group = openJoined(key, 3, rank);
    CHILD_CHECK(group != nullptr);
    float value = 1.0f, out = 0;
    if (rank == 0) {
      // Never enters the collective; aborts while the others wait in it.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      flags->abortedAtNanos = nowNanos();
      group->abort();
    } else {
      const ShmResult result = group->allReduce(&value, &out, 1, ShmType::kFloat32, ShmOp::kSum);
      const int64_t returned = nowNanos();
      const int64_t abortedAt = flags->abortedAtNanos.load();
      CHILD_CHECK(result == ShmResult::kAborted);
      CHILD_CHECK(abortedAt != 0 && abortedAt <= returned);
      CHILD_CHECK(returned - abortedAt < 2'000'000'000);
      std::fprintf(stderr, "rank %d: aborted wait returned %.3f ms after abort()\n", rank,
                   static_cast<double>(returned - abortedAt) / 1e6);
    }
    // The group is dead for every rank from now on, at once.
    const auto start = Clock::now();
    CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kFloat32, ShmOp::kSum) ==
                ShmResult::kAborted);
    CHILD_CHECK(group->allGather(&value, &out, 0, ShmType::kFloat32) == ShmResult::kAborted);
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(500));  // at once, not a wait
    return true;
  });
  munmap(flags, sizeof(SharedFlags));
}

TEST(ShmCollectives, AbortFromAnotherThread) {
  const Key key = randomKey();
  SharedFlags* flags = mapSharedFlags();
  ASSERT_NE(flags, nullptr);
  runRanks(2, [&](int rank) {
    std::unique_ptr<ShmGroup> group = openJoined(key, 2, rank);
    CHILD_CHECK(group != nullptr);
    uint32_t value = 1, out = 0;
    if (rank == 1) {
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        group->abort();
      });
      const auto start = Clock::now();
      const ShmResult result = group->allReduce(&value, &out, 1, ShmType::kUInt32, ShmOp::kSum);
      aborter.join();
      CHILD_CHECK(result == ShmResult::kAborted);
      CHILD_CHECK(Clock::now() - start < std::chrono::seconds(2));
      flags->done = 1;
    } else {
      // Waits outside the group until rank 1 is done, then finds the group aborted.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (flags->done.load() == 0 && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      CHILD_CHECK(flags->done.load() == 1);
      CHILD_CHECK(group->reduceScatter(&value, &out, 1, ShmType::kUInt32, ShmOp::kSum) ==
                  ShmResult::kAborted);
    }
    return true;
  });
  munmap(flags, sizeof(SharedFlags));
}

// abortHere ends only this process's waits (NCCL's abort is local): its peer, waiting in the same
// collective, times out instead of seeing an abort.
TEST(ShmCollectives, AbortHereEndsOnlyThisProcesssWaits) {
  const Key key = randomKey();
  runRanks(2, [&](int rank) {
    setenv("FAKE_NCCL_WAIT_SEC", "1", 1);
    std::unique_ptr<ShmGroup> group = openJoined(key, 2, rank);
    CHILD_CHECK(group != nullptr);
    uint32_t value = 1, out = 0;
    if (rank == 0) {
      group->abortHere();
      CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kUInt32, ShmOp::kSum) ==
                  ShmResult::kAborted);
    } else {
      CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kUInt32, ShmOp::kSum) ==
                  ShmResult::kTimedOut);
    }
    return true;
  });
}

// Ranks that make different calls (another count, another collective) all get kError, at once.
TEST(ShmCollectives, DivergingCallsFailOnEveryRank) {
  const Key key = randomKey();
  runRanks(3, [&](int rank) {
    std::unique_ptr<ShmGroup> group = openJoined(key, 3, rank);
    CHILD_CHECK(group != nullptr);
    float in[4] = {1, 2, 3, 4}, out[12] = {};
    const size_t count = rank == 2 ? 3 : 4;
    CHILD_CHECK(group->allReduce(in, out, count, ShmType::kFloat32, ShmOp::kSum) ==
                ShmResult::kError);
    const ShmResult mixed = rank == 0
                                ? group->allGather(in, out, 4, ShmType::kFloat32)
                                : group->allReduce(in, out, 4, ShmType::kFloat32, ShmOp::kSum);
    CHILD_CHECK(mixed == ShmResult::kError);
    CHILD_CHECK(group->allReduce(in, out, 4, ShmType::kFloat32, ShmOp::kSum) == ShmResult::kOk);
    CHILD_CHECK(out[0] == 3.0f);
    return true;
  });
}

TEST(ShmCollectives, TimesOutOnAPeerThatNeverCalls) {
  const Key key = randomKey();
  SharedFlags* flags = mapSharedFlags();
  ASSERT_NE(flags, nullptr);
  runRanks(3, [&](int rank) {
    setenv("FAKE_NCCL_WAIT_SEC", "1", 1);
    std::unique_ptr<ShmGroup> group = openJoined(key, 3, rank);
    CHILD_CHECK(group != nullptr);
    if (rank == 2) {
      // Joins, then never calls; stays until the others are done.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (flags->done.load() < 2 && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return flags->done.load() == 2;
    }
    double value = 1, out = 0;
    auto start = Clock::now();
    CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kFloat64, ShmOp::kSum) ==
                ShmResult::kTimedOut);
    const auto waited = Clock::now() - start;
    CHILD_CHECK(waited >= std::chrono::milliseconds(950));
    CHILD_CHECK(waited < std::chrono::seconds(5));
    // Dead from now on: the same result at once.
    start = Clock::now();
    CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kFloat64, ShmOp::kSum) ==
                ShmResult::kTimedOut);
    CHILD_CHECK(group->reduceScatter(&value, &out, 1, ShmType::kFloat64, ShmOp::kSum) ==
                ShmResult::kTimedOut);
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(500));  // at once, not a wait
    flags->done.fetch_add(1);
    return true;
  });
  munmap(flags, sizeof(SharedFlags));
}

// Bad calls fail before any wait, on every rank alike, and leave the group usable.
TEST(ShmCollectives, ErrorsLeaveTheGroupUsable) {
  const Key key = randomKey();
  runRanks(2, [&](int rank) {
    std::unique_ptr<ShmGroup> group = openJoined(key, 2, rank);
    CHILD_CHECK(group != nullptr);
    double value = 1, out = 0;
    const size_t huge = std::numeric_limits<size_t>::max() / 4;
    CHILD_CHECK(group->allReduce(&value, &out, huge, ShmType::kFloat64, ShmOp::kSum) ==
                ShmResult::kError);
    CHILD_CHECK(group->reduceScatter(&value, &out, std::numeric_limits<size_t>::max() / 2 + 1,
                                     ShmType::kInt8, ShmOp::kSum) == ShmResult::kError);
    CHILD_CHECK(group->allGather(&value, &out, huge, ShmType::kInt32) == ShmResult::kError);
    CHILD_CHECK(group->allReduce(&value, &out, 1, static_cast<ShmType>(77), ShmOp::kSum) ==
                ShmResult::kError);
    CHILD_CHECK(group->allReduce(&value, &out, 1, ShmType::kFloat64, static_cast<ShmOp>(9)) ==
                ShmResult::kError);
    CHILD_CHECK(group->allReduce(nullptr, &out, 1, ShmType::kFloat64, ShmOp::kSum) ==
                ShmResult::kError);
    CHILD_CHECK(group->allGather(&value, nullptr, 1, ShmType::kFloat64) == ShmResult::kError);
    return checkAllReduce(*group, ShmType::kFloat64, ShmOp::kSum, 11, 400, false) &&
           checkReduceScatter(*group, ShmType::kInt8, ShmOp::kSum, 11, 401, false);
  });
}

}  // namespace
}  // namespace gfshim::emulated
