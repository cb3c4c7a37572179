// Blocking collectives between processes of one machine over POSIX shared memory: the engine of
// the fake NCCL (fake_nccl.cpp), whose ranks are separate MPI processes.
//
// Each rank opens a ShmGroup for the same key (a communicator's unique id); the group is one
// shared segment, "/gfshim-fake-nccl-<hex of the key>" in /dev/shm, holding a header of lock-free
// atomics and one data slot per rank of FAKE_NCCL_SLOT_BYTES bytes (default 4 MiB, at least
// 4 KiB, rounded down to a multiple of 64). Its name is unlinked once every rank has opened it
// (allJoined), or when a rank's group is destroyed, so nothing is left in /dev/shm.
//
// A collective runs in pieces of as many whole elements as fit in a slot, the same boundaries on
// every rank. Per piece: each rank copies its part of the input into its slot, a barrier, each
// rank computes its output from all the slots, a barrier (the slots can be reused). Reductions
// run strictly in rank order (acc = v0, acc = acc op v1, ...), so every rank gets the same bits:
// integer SUM and PROD wrap around, MAX/MIN are the library's (cpuReduceFn), and fp16/bf16 are
// widened to fp32, combined there and rounded back (to nearest, ties to even) after every step.
//
// A wait spins briefly, then sleeps about 50 us between checks. Every check sees the group's
// shared abort flag (abort() of any rank: every current and later wait returns kAborted) and the
// deadline, FAKE_NCCL_WAIT_SEC seconds (default 120, fractions allowed) from the wait's start
// (kTimedOut; a timeout is this rank's own, not reported to its peers). After either, the group
// is dead: every later call returns the same result at once. Both variables are read at open.
//
// Thread safety: one thread at a time runs the collectives of a group; abort() may be called
// from any thread at any time. Groups of different keys are independent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gfshim::emulated {

enum class ShmType {
  kInt8,
  kUInt8,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64
};
enum class ShmOp { kSum, kProd, kMax, kMin };
enum class ShmResult { kOk, kAborted, kTimedOut, kError };

// Bytes per element; 0 for a value outside the enum.
size_t shmTypeBytes(ShmType type);
// "ok", "aborted by a rank", "timed out waiting for a peer", "error".
const char* shmResultName(ShmResult result);

class ShmGroup {
 public:
  // Opens the shared segment of `key` (keyBytes bytes), creating it if needed, for `ranks` ranks
  // as `rank`, and counts this rank as joined. Does not wait for the others. nullptr with *why
  // (when given) on failure: bad ranks or rank, an empty key, shm_open/ftruncate/mmap failing, or
  // a segment some other rank opened with a different number of ranks or slot size.
  static std::unique_ptr<ShmGroup> open(const void* key, size_t keyBytes, int ranks, int rank,
                                        std::string* why);
  // The segment's name for `key`: "/gfshim-fake-nccl-" and the hex of the key's first 16 bytes,
  // then, for a longer key, "-" and the hex of a 64-bit hash of all of it.
  static std::string segmentName(const void* key, size_t keyBytes);

  // Unmaps the segment and unlinks its name (ENOENT ignored); never waits.
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Nonblocking: whether every rank has opened the segment. Once true, unlinks its name (once;
  // ENOENT ignored).
  bool allJoined();

  // Blocking collectives; every rank calls the same sequence with the same counts, types and ops.
  // Buffers are host memory. kError (before any wait, the group stays usable) for a bad type or
  // op, a byte count that overflows size_t, or a null buffer with a nonzero count. A count of 0
  // still runs one piece's barriers.
  //
  // recv[i] = send_0[i] op ... op send_{ranks-1}[i]. In place: send == recv.
  ShmResult allReduce(const void* send, void* recv, size_t count, ShmType type, ShmOp op);
  // send holds ranks*recvCount elements; rank r gets the reduction of block r (elements
  // [r*recvCount, (r+1)*recvCount)). In place: recv == send + rank*recvCount elements.
  ShmResult reduceScatter(const void* send, void* recv, size_t recvCount, ShmType type, ShmOp op);
  // recv gets ranks*sendCount elements, block r from rank r. In place: send == recv +
  // rank*sendCount elements.
  ShmResult allGather(const void* send, void* recv, size_t sendCount, ShmType type);

  // Marks the group aborted for every rank: each rank's current or later wait returns kAborted
  // within about a millisecond. Any thread, any time.
  void abort();
  // Ends this process's current and later waits (kAborted) without telling the other ranks, as
  // ncclCommAbort does: they notice only by their own timeouts. Any thread, any time.
  void abortHere();

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }

 private:
  struct Header;

  ShmGroup() = default;
  // One barrier of all ranks; kOk, or the group's death.
  ShmResult barrier();
  // Before a collective's data moves: every rank must be making the same call (`kind`, count,
  // type, op). Real NCCL would hang or mix the data of different calls; here every rank gets
  // kError and a message on stderr, so a test fails at the divergence.
  ShmResult sameCallEverywhere(int kind, size_t count, ShmType type, ShmOp op);
  // Checks a call before it runs: the group's death or kError (sets *bytes to count*element).
  ShmResult precheck(ShmType type, size_t count, size_t factor, const void* send, const void* recv,
                     size_t* elementBytes);
  uint8_t* slot(int rank) const;
  // out = the rank-order reduction of `count` elements at byte `offset` of every slot.
  void reduceSlots(size_t offset, size_t count, ShmType type, ShmOp op, void* out);

  std::string name_;
  int ranks_ = 0;
  int rank_ = 0;
  size_t slotBytes_ = 0;
  double waitSeconds_ = 0;
  void* base_ = nullptr;
  size_t mappedBytes_ = 0;
  Header* header_ = nullptr;
  bool unlinked_ = false;
  ShmResult dead_ = ShmResult::kOk;
  std::atomic<bool> abortedHere_{false};
  // Scratch of reduceSlots, a chunk at a time.
  std::unique_ptr<uint8_t[]> accBytes_, nextBytes_;
  std::unique_ptr<float[]> accFloats_, inFloats_, outFloats_;
};

}  // namespace gfshim::emulated
