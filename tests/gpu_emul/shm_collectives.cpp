#include "shm_collectives.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "algo/reducer.h"
#include "common/types.h"
#include "compress/half_codec.h"

namespace gfshim::emulated {

// The start of the segment; zero-initialised by the first ftruncate. Every field is a lock-free
// atomic, so processes share it through the mapping.
struct ShmGroup::Header {
  // (1 << 63) | ranks << 40 | slot bytes, set by the first opener; later openers must match it.
  std::atomic<uint64_t> geometry;
  std::atomic<uint32_t> joined;   // openers so far
  std::atomic<uint32_t> aborted;  // nonzero once any rank called abort(); never cleared
  // The barrier: ranks arrived at the current one, and how many have completed.
  alignas(64) std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
};

namespace {

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

constexpr size_t kHeaderBytes = 256;  // slots start 64-byte aligned
constexpr size_t kDefaultSlotBytes = size_t{4} << 20;
constexpr size_t kMinSlotBytes = 4096;
constexpr size_t kMaxSlotBytes = size_t{1} << 30;
constexpr int kMaxRanks = 1 << 16;
constexpr double kDefaultWaitSeconds = 120;
constexpr size_t kChunkElements = 4096;  // reduceSlots' scratch, in elements
constexpr size_t kMaxElementBytes = 8;
constexpr int kSpinChecks = 200;  // checks before a wait starts sleeping
constexpr auto kSleep = std::chrono::microseconds(50);

void setWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

std::string errnoText(const char* call, const std::string& name) {
  return std::string(call) + "(" + name + "): " + std::strerror(errno);
}

size_t slotBytesFromEnv() {
  const char* text = std::getenv("FAKE_NCCL_SLOT_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultSlotBytes;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return kDefaultSlotBytes;
  const size_t bytes =
      static_cast<size_t>(std::clamp<unsigned long long>(value, kMinSlotBytes, kMaxSlotBytes));
  return bytes / 64 * 64;
}

double waitSecondsFromEnv() {
  const char* text = std::getenv("FAKE_NCCL_WAIT_SEC");
  if (text == nullptr || *text == '\0') return kDefaultWaitSeconds;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (*end != '\0' || !std::isfinite(value) || value <= 0) return kDefaultWaitSeconds;
  return std::min(value, 1e9);
}

bool validOp(ShmOp op) {
  switch (op) {
    case ShmOp::kSum:
    case ShmOp::kProd:
    case ShmOp::kMax:
    case ShmOp::kMin:
      return true;
  }
  return false;
}

RedOp redOpOf(ShmOp op) {
  switch (op) {
    case ShmOp::kSum:
      return RedOp::kSum;
    case ShmOp::kProd:
      return RedOp::kProd;
    case ShmOp::kMax:
      return RedOp::kMax;
    case ShmOp::kMin:
      return RedOp::kMin;
  }
  return RedOp::kSum;
}

// The library's type for the types cpuReduceFn reduces; kFloat32 for the 16-bit floats, which
// are combined in fp32.
DType dtypeOf(ShmType type) {
  switch (type) {
    case ShmType::kInt8:
      return DType::kInt8;
    case ShmType::kUInt8:
      return DType::kUInt8;
    case ShmType::kInt32:
      return DType::kInt32;
    case ShmType::kUInt32:
      return DType::kUInt32;
    case ShmType::kInt64:
      return DType::kInt64;
    case ShmType::kUInt64:
      return DType::kUInt64;
    case ShmType::kFloat64:
      return DType::kFloat64;
    case ShmType::kFloat16:
    case ShmType::kBfloat16:
    case ShmType::kFloat32:
      return DType::kFloat32;
  }
  return DType::kFloat32;
}

bool isHalf(ShmType type) { return type == ShmType::kFloat16 || type == ShmType::kBfloat16; }

uint64_t fnv1a(const uint8_t* bytes, size_t n) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void appendHex(std::string* text, const uint8_t* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    *text += kDigits[bytes[i] >> 4];
    *text += kDigits[bytes[i] & 15];
  }
}

}  // namespace

size_t shmTypeBytes(ShmType type) {
  switch (type) {
    case ShmType::kInt8:
    case ShmType::kUInt8:
      return 1;
    case ShmType::kFloat16:
    case ShmType::kBfloat16:
      return 2;
    case ShmType::kInt32:
    case ShmType::kUInt32:
    case ShmType::kFloat32:
      return 4;
    case ShmType::kInt64:
    case ShmType::kUInt64:
    case ShmType::kFloat64:
      return 8;
  }
  return 0;
}

const char* shmResultName(ShmResult result) {
  switch (result) {
    case ShmResult::kOk:
      return "ok";
    case ShmResult::kAborted:
      return "aborted by a rank";
    case ShmResult::kTimedOut:
      return "timed out waiting for a peer";
    case ShmResult::kError:
      return "error";
  }
  return "error";
}

std::string ShmGroup::segmentName(const void* key, size_t keyBytes) {
  const uint8_t* bytes = static_cast<const uint8_t*>(key);
  std::string name = "/gfshim-fake-nccl-";
  if (keyBytes == 0) return name;
  appendHex(&name, bytes, std::min<size_t>(keyBytes, 16));
  if (keyBytes > 16) {
    const uint64_t hash = fnv1a(bytes, keyBytes);
    uint8_t hashBytes[8];
    for (int i = 0; i < 8; ++i) hashBytes[i] = static_cast<uint8_t>(hash >> (56 - 8 * i));
    name += '-';
    appendHex(&name, hashBytes, sizeof(hashBytes));
  }
  return name;
}

std::unique_ptr<ShmGroup> ShmGroup::open(const void* key, size_t keyBytes, int ranks, int rank,
                                         std::string* why) {
  if (ranks < 1 || ranks > kMaxRanks) {
    setWhy(why, "bad number of ranks " + std::to_string(ranks));
    return nullptr;
  }
  if (rank < 0 || rank >= ranks) {
    setWhy(why, "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(ranks) + ")");
    return nullptr;
  }
  if (key == nullptr || keyBytes == 0) {
    setWhy(why, "empty group key");
    return nullptr;
  }
  std::unique_ptr<ShmGroup> group(new ShmGroup());
  group->name_ = segmentName(key, keyBytes);
  group->unlinked_ = true;  // a failed open leaves the name to the ranks that did open it
  group->ranks_ = ranks;
  group->rank_ = rank;
  group->slotBytes_ = slotBytesFromEnv();
  group->waitSeconds_ = waitSecondsFromEnv();
  const size_t total = kHeaderBytes + static_cast<size_t>(ranks) * group->slotBytes_;
  const std::string& name = group->name_;

  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) {
    setWhy(why, errnoText("shm_open", name));
    return nullptr;
  }
  // Only ever grown: shrinking could cut the mapping of a rank that opened it already. A rank
  // with another geometry fails below.
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    setWhy(why, errnoText("fstat", name));
    close(fd);
    return nullptr;
  }
  if (static_cast<uint64_t>(st.st_size) < total && ftruncate(fd, static_cast<off_t>(total)) != 0) {
    setWhy(why, errnoText("ftruncate", name));
    close(fd);
    return nullptr;
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    setWhy(why, errnoText("mmap", name));
    close(fd);
    return nullptr;
  }
  close(fd);
  group->base_ = base;
  group->mappedBytes_ = total;
  group->header_ = static_cast<Header*>(base);

  Header& header = *group->header_;
  const uint64_t geometry =
      (uint64_t{1} << 63) | (static_cast<uint64_t>(ranks) << 40) | group->slotBytes_;
  uint64_t expected = 0;
  if (!header.geometry.compare_exchange_strong(expected, geometry, std::memory_order_acq_rel) &&
      expected != geometry) {
    setWhy(why, name + " was opened for " + std::to_string((expected >> 40) & 0x7fffff) +
                    " ranks with slots of " + std::to_string(expected & ((uint64_t{1} << 40) - 1)) +
                    " bytes, this rank asks for " + std::to_string(ranks) + " ranks and " +
                    std::to_string(group->slotBytes_) + " bytes (FAKE_NCCL_SLOT_BYTES)");
    return nullptr;  // the destructor unmaps
  }
  header.joined.fetch_add(1, std::memory_order_acq_rel);
  group->unlinked_ = false;

  const size_t scratchBytes = kChunkElements * kMaxElementBytes;
  group->accBytes_.reset(new uint8_t[scratchBytes]);
  group->nextBytes_.reset(new uint8_t[scratchBytes]);
  group->accFloats_.reset(new float[kChunkElements]);
  group->inFloats_.reset(new float[kChunkElements]);
  group->outFloats_.reset(new float[kChunkElements]);
  return group;
}

ShmGroup::~ShmGroup() {
  if (base_ != nullptr) munmap(base_, mappedBytes_);
  // A group destroyed before every rank joined leaves no name behind either (a late rank then
  // makes a segment of its own and times out, as it would waiting for this one).
  if (!unlinked_ && !name_.empty()) shm_unlink(name_.c_str());
}

bool ShmGroup::allJoined() {
  if (header_->joined.load(std::memory_order_acquire) < static_cast<uint32_t>(ranks_)) {
    return false;
  }
  if (!unlinked_) {
    shm_unlink(name_.c_str());  // ENOENT: a peer unlinked it first
    unlinked_ = true;
  }
  return true;
}

void ShmGroup::abort() { header_->aborted.store(1, std::memory_order_release); }

void ShmGroup::abortHere() { abortedHere_.store(true, std::memory_order_release); }

uint8_t* ShmGroup::slot(int rank) const {
  return static_cast<uint8_t*>(base_) + kHeaderBytes + static_cast<size_t>(rank) * slotBytes_;
}

ShmResult ShmGroup::barrier() {
  if (dead_ != ShmResult::kOk) return dead_;
  Header& header = *header_;
  if (header.aborted.load(std::memory_order_acquire) != 0 ||
      abortedHere_.load(std::memory_order_acquire)) {
    return dead_ = ShmResult::kAborted;
  }
  // Read before arriving: the generation cannot move on until this rank has arrived.
  const uint32_t generation = header.generation.load(std::memory_order_acquire);
  // acq_rel: this rank's slot writes before, its peers' after, for the rank that arrives last
  // (the increments form one release sequence) and, through the generation, for the others.
  if (header.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(ranks_)) {
    header.arrived.store(0, std::memory_order_relaxed);
    header.generation.fetch_add(1, std::memory_order_release);
    return ShmResult::kOk;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(waitSeconds_));
  for (int checks = 0;; ++checks) {
    if (header.generation.load(std::memory_order_acquire) != generation) return ShmResult::kOk;
    if (header.aborted.load(std::memory_order_acquire) != 0 ||
        abortedHere_.load(std::memory_order_acquire)) {
      return dead_ = ShmResult::kAborted;
    }
    if (checks < kSpinChecks) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) return dead_ = ShmResult::kTimedOut;
    std::this_thread::sleep_for(kSleep);
  }
}

ShmResult ShmGroup::precheck(ShmType type, size_t count, size_t factor, const void* send,
                             const void* recv, size_t* elementBytes) {
  if (dead_ != ShmResult::kOk) return dead_;
  if (header_->aborted.load(std::memory_order_acquire) != 0 ||
      abortedHere_.load(std::memory_order_acquire)) {
    return dead_ = ShmResult::kAborted;
  }
  const size_t bytes = shmTypeBytes(type);
  if (bytes == 0) return ShmResult::kError;
  if (count != 0 && (count > SIZE_MAX / factor || count * factor > SIZE_MAX / bytes)) {
    return ShmResult::kError;
  }
  if (count != 0 && (send == nullptr || recv == nullptr)) return ShmResult::kError;
  *elementBytes = bytes;
  return ShmResult::kOk;
}

void ShmGroup::reduceSlots(size_t offset, size_t count, ShmType type, ShmOp op, void* out) {
  const size_t bytes = shmTypeBytes(type);
  uint8_t* target = static_cast<uint8_t*>(out);
  const ReduceFn combine = cpuReduceFn(dtypeOf(type), redOpOf(op));
  const HalfFormat format = type == ShmType::kBfloat16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
  for (size_t done = 0; done < count; done += kChunkElements) {
    const size_t n = std::min(kChunkElements, count - done);
    const size_t at = offset + done * bytes;
    uint8_t* acc = accBytes_.get();
    if (ranks_ == 1) {
      std::memcpy(acc, slot(0) + at, n * bytes);
    } else if (isHalf(type)) {
      // acc = round16(from16(acc) op from16(v_r)), starting from v_0.
      uint16_t* acc16 = reinterpret_cast<uint16_t*>(acc);
      decodeHalf(format, reinterpret_cast<const uint16_t*>(slot(0) + at), accFloats_.get(), n);
      for (int r = 1; r < ranks_; ++r) {
        decodeHalf(format, reinterpret_cast<const uint16_t*>(slot(r) + at), inFloats_.get(), n);
        combine(accFloats_.get(), inFloats_.get(), outFloats_.get(), n);
        encodeHalf(format, outFloats_.get(), 1.0f, acc16, n);
        if (r + 1 < ranks_) decodeHalf(format, acc16, accFloats_.get(), n);
      }
    } else {
      // acc = v_0 op v_1, then acc op v_r into the other buffer (out must not alias a).
      uint8_t* next = nextBytes_.get();
      combine(slot(0) + at, slot(1) + at, acc, n);
      for (int r = 2; r < ranks_; ++r) {
        combine(acc, slot(r) + at, next, n);
        std::swap(acc, next);
      }
    }
    std::memcpy(target + done * bytes, acc, n * bytes);
  }
}

ShmResult ShmGroup::sameCallEverywhere(int kind, size_t count, ShmType type, ShmOp op) {
  const uint64_t mine = static_cast<uint64_t>(kind) << 56 ^ static_cast<uint64_t>(type) << 48 ^
                        static_cast<uint64_t>(op) << 40 ^ static_cast<uint64_t>(count);
  std::memcpy(slot(rank_), &mine, sizeof mine);
  ShmResult result = barrier();
  if (result != ShmResult::kOk) return result;
  int differs = -1;
  for (int r = 0; r < ranks_ && differs < 0; ++r) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, slot(r), sizeof theirs);
    if (theirs != mine) differs = r;
  }
  result = barrier();  // nobody overwrites a slot before every rank has read them all
  if (result != ShmResult::kOk) return result;
  if (differs < 0) return ShmResult::kOk;
  std::fprintf(stderr,
               "emulated NCCL: rank %d of %s calls collective %d (count %zu, type %d, op %d), "
               "rank %d another: the ranks diverged\n",
               rank_, name_.c_str(), kind, count, static_cast<int>(type), static_cast<int>(op),
               differs);
  return ShmResult::kError;
}

ShmResult ShmGroup::allReduce(const void* send, void* recv, size_t count, ShmType type, ShmOp op) {
  size_t bytes = 0;
  const ShmResult checked = precheck(type, count, 1, send, recv, &bytes);
  if (checked != ShmResult::kOk) return checked;
  if (!validOp(op)) return ShmResult::kError;
  const ShmResult same = sameCallEverywhere(1, count, type, op);
  if (same != ShmResult::kOk) return same;
  const size_t pieceElements = slotBytes_ / bytes;
  size_t done = 0;
  do {
    const size_t n = std::min(pieceElements, count - done);
    if (n > 0)
      std::memcpy(slot(rank_), static_cast<const uint8_t*>(send) + done * bytes, n * bytes);
    ShmResult result = barrier();
    if (result != ShmResult::kOk) return result;
    // In place, this overwrites only the piece just copied.
    if (n > 0) reduceSlots(0, n, type, op, static_cast<uint8_t*>(recv) + done * bytes);
    result = barrier();
    if (result != ShmResult::kOk) return result;
    done += n;
  } while (done < count);
  return ShmResult::kOk;
}

ShmResult ShmGroup::reduceScatter(const void* send, void* recv, size_t recvCount, ShmType type,
                                  ShmOp op) {
  size_t bytes = 0;
  const ShmResult checked =
      precheck(type, recvCount, static_cast<size_t>(ranks_), send, recv, &bytes);
  if (checked != ShmResult::kOk) return checked;
  if (!validOp(op)) return ShmResult::kError;
  const ShmResult same = sameCallEverywhere(2, recvCount, type, op);
  if (same != ShmResult::kOk) return same;
  // Pieces of the whole send buffer; this rank keeps the part of each inside its own block.
  const size_t total = recvCount * static_cast<size_t>(ranks_);
  const size_t blockStart = recvCount * static_cast<size_t>(rank_);
  const size_t blockEnd = blockStart + recvCount;
  const size_t pieceElements = slotBytes_ / bytes;
  size_t done = 0;
  do {
    const size_t n = std::min(pieceElements, total - done);
    if (n > 0)
      std::memcpy(slot(rank_), static_cast<const uint8_t*>(send) + done * bytes, n * bytes);
    ShmResult result = barrier();
    if (result != ShmResult::kOk) return result;
    const size_t lo = std::max(done, blockStart);
    const size_t hi = std::min(done + n, blockEnd);
    // In place, recv[lo - blockStart] is send[lo], inside the piece just copied.
    if (lo < hi) {
      reduceSlots((lo - done) * bytes, hi - lo, type, op,
                  static_cast<uint8_t*>(recv) + (lo - blockStart) * bytes);
    }
    result = barrier();
    if (result != ShmResult::kOk) return result;
    done += n;
  } while (done < total);
  return ShmResult::kOk;
}

ShmResult ShmGroup::allGather(const void* send, void* recv, size_t sendCount, ShmType type) {
  size_t bytes = 0;
  const ShmResult checked =
      precheck(type, sendCount, static_cast<size_t>(ranks_), send, recv, &bytes);
  if (checked != ShmResult::kOk) return checked;
  const ShmResult same = sameCallEverywhere(3, sendCount, type, ShmOp::kSum);
  if (same != ShmResult::kOk) return same;
  const size_t pieceElements = slotBytes_ / bytes;
  size_t done = 0;
  do {
    const size_t n = std::min(pieceElements, sendCount - done);
    if (n > 0)
      std::memcpy(slot(rank_), static_cast<const uint8_t*>(send) + done * bytes, n * bytes);
    ShmResult result = barrier();
    if (result != ShmResult::kOk) return result;
    // In place, this rank's own block gets the bits it already holds.
    for (int r = 0; r < ranks_ && n > 0; ++r) {
      std::memcpy(static_cast<uint8_t*>(recv) + (static_cast<size_t>(r) * sendCount + done) * bytes,
                  slot(r), n * bytes);
    }
    result = barrier();
    if (result != ShmResult::kOk) return result;
    done += n;
  } while (done < sendCount);
  return ShmResult::kOk;
}

}  // namespace gfshim::emulated
