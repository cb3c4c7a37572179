#include "gpu/staged_allreduce.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/log.h"

namespace gfshim {
namespace {

constexpr int kMpolPreferred = 1;  // <linux/mempolicy.h>, without needing libnuma

void preferNumaNode(void* memory, size_t bytes, int numaNode) {
  if (numaNode < 0 || numaNode >= 64) return;
  const unsigned long mask = 1UL << numaNode;
  // Best effort: a wrong or absent node only costs locality.
  if (syscall(SYS_mbind, memory, bytes, kMpolPreferred, &mask, 64, 0) != 0) {
    GFSHIM_TRACE(kEngine, "staging: mbind to NUMA node %d failed", numaNode);
  }
}

}  // namespace

StagingArea::~StagingArea() { release(); }

void StagingArea::release() {
  if (driver_ != nullptr) {
    // Stream destruction returns before the stream's work is done: nothing may still copy into
    // the slots when they are unpinned and unmapped.
    if (stream_ != nullptr) (void)driver_->synchronize(context_, stream_);
    for (void*& event : events_) {
      if (event != nullptr) driver_->destroyEvent(context_, event);
      event = nullptr;
    }
    if (entryEvent_ != nullptr) driver_->destroyEvent(context_, entryEvent_);
    entryEvent_ = nullptr;
    if (stream_ != nullptr) driver_->destroyStream(context_, stream_);
    if (pinned_) driver_->unpinHost(context_, memory_);
  }
  driver_ = nullptr;
  context_ = nullptr;
  stream_ = nullptr;
  pinned_ = false;
  if (memory_ != nullptr) munmap(memory_, mappedBytes_);
  memory_ = nullptr;
  mappedBytes_ = 0;
  slotBytes_ = 0;
  slotCount_ = 1;
  slots_[0] = slots_[1] = nullptr;
}

Status StagingArea::prepare(const CudaDriver& driver, void* context, size_t slots, size_t slotBytes,
                            int numaNode) {
  if (driver_ == &driver && context_ == context && slots <= slotCount_ && slotBytes <= slotBytes_) {
    return Status::ok();
  }
  release();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (std::max<size_t>(slotBytes, 1) + page - 1) / page * page;
  slots = std::min<size_t>(std::max<size_t>(slots, 1), 2);
  void* memory =
      mmap(nullptr, slots * rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    return Status::error(StatusCode::kOutOfMemory, "no host memory for the staging slots");
  }
  driver_ = &driver;
  context_ = context;
  memory_ = static_cast<std::byte*>(memory);
  mappedBytes_ = slots * rounded;
  slotBytes_ = rounded;
  slotCount_ = slots;
  slots_[0] = memory_;
  slots_[1] = slots > 1 ? memory_ + rounded : memory_;
  preferNumaNode(memory_, mappedBytes_, numaNode);
  // A forked child (a data-loader worker) must not get copy-on-write pages of pinned memory.
  (void)madvise(memory_, mappedBytes_, MADV_DONTFORK);
  const Status pin = driver.pinHost(context, memory_, mappedBytes_);
  pinned_ = pin.isOk();
  if (!pinned_) {
    // Pageable slots still work; the asynchronous copies then run synchronously.
    GFSHIM_WARN(kEngine, "staging: %s; staging copies use pageable memory", pin.message().c_str());
  }
  Status status = driver.createStream(context, &stream_);
  for (size_t i = 0; i < slots && status.isOk(); ++i) {
    status = driver.createEvent(context, &events_[i]);
  }
  if (status.isOk()) status = driver.createEvent(context, &entryEvent_);
  if (!status.isOk()) release();
  return status;
}

Status runStagedAllreduce(const CudaDriver* driver, StagingArea& area, int numaNode,
                          const StagedCall& call, size_t blockElements, const BlockReduce& reduce) {
  if (call.count == 0) return Status::ok();
  blockElements = std::max<size_t>(1, std::min(blockElements, call.count));
  const bool sendOnDevice = call.at.send.kind == MemKind::kDevice;
  const bool recvOnDevice = call.at.recv.kind == MemKind::kDevice;
  const size_t blocks = (call.count + blockElements - 1) / blockElements;
  const auto firstOf = [&](size_t block) { return block * blockElements; };
  const auto elementsOf = [&](size_t block) {
    return std::min(blockElements, call.count - firstOf(block));
  };
  const auto bytesOf = [&](size_t block) { return elementsOf(block) * call.elementBytes; };
  const auto at = [&](const void* base, size_t block) {
    return const_cast<std::byte*>(static_cast<const std::byte*>(base) +
                                  firstOf(block) * call.elementBytes);
  };
  if (!sendOnDevice && !recvOnDevice) {
    for (size_t block = 0; block < blocks; ++block) {
      GFSHIM_RETURN_IF_ERROR(
          reduce(at(call.send, block), at(call.recv, block), firstOf(block), elementsOf(block)));
    }
    return Status::ok();
  }
  if (driver == nullptr) {
    return Status::error(StatusCode::kInternal, "a device buffer without the CUDA driver");
  }
  void* context = sendOnDevice ? call.at.send.context : call.at.recv.context;
  Status local = area.prepare(*driver, context, blocks > 1 ? 2 : 1,
                              blockElements * call.elementBytes, numaNode);
  if (!local.isOk()) {
    // No slots: zeros go into every block, so the peers' collectives still complete.
    std::vector<std::byte> zeros(bytesOf(0));
    for (size_t block = 0; block < blocks; ++block) {
      std::fill(zeros.begin(), zeros.end(), std::byte{0});
      void* out = recvOnDevice ? zeros.data() : at(call.recv, block);
      const void* in = sendOnDevice ? static_cast<const void*>(zeros.data()) : at(call.send, block);
      const Status reduced = reduce(in, out, firstOf(block), elementsOf(block));
      if (!reduced.isOk()) return reduced;
    }
    return local;
  }
  void* stream = area.stream();
  // The copies come after the application's work on its legacy default stream and on every
  // blocking stream (a per-thread default stream included), as a synchronous copy would.
  local = driver->orderAfterLegacyStream(context, area.entryEvent(), stream);
  std::vector<bool> inFailed(blocks, false);
  const auto stageIn = [&](size_t block) {
    if (!sendOnDevice) return;
    Status status = driver->copyToHostAsync(context, area.slot(block), at(call.send, block),
                                            bytesOf(block), stream);
    if (status.isOk()) status = driver->recordEvent(context, area.event(block), stream);
    if (!status.isOk()) {
      inFailed[block] = true;
      if (local.isOk()) local = status;
    }
  };
  stageIn(0);
  Status collective = Status::ok();
  for (size_t block = 0; block < blocks && collective.isOk(); ++block) {
    if (block + 1 < blocks) stageIn(block + 1);
    // The slot's latest event: its in-copy, or the out-copy of the block two before.
    if (block >= 2 || sendOnDevice) {
      const Status waited = driver->waitEvent(context, area.event(block));
      if (!waited.isOk()) {
        inFailed[block] = true;
        if (local.isOk()) local = waited;
      }
    }
    if (inFailed[block]) std::memset(area.slot(block), 0, bytesOf(block));
    const void* in = sendOnDevice ? area.slot(block) : at(call.send, block);
    void* out = recvOnDevice ? area.slot(block) : at(call.recv, block);
    collective = reduce(in, out, firstOf(block), elementsOf(block));
    if (!collective.isOk() || !recvOnDevice) continue;
    Status status = driver->copyToDeviceAsync(context, at(call.recv, block), area.slot(block),
                                              bytesOf(block), stream);
    if (status.isOk()) status = driver->recordEvent(context, area.event(block), stream);
    if (!status.isOk() && local.isOk()) local = status;
  }
  // Drain the stream even after an error: no copy may still write into a slot or the user's buffer.
  const Status drained = driver->synchronize(context, stream);
  // After a driver error the area's stream and events may be dead (cudaDeviceReset destroys
  // them): the next call makes new ones.
  if (!local.isOk() || !drained.isOk()) area.release();
  if (!collective.isOk()) return collective;
  return local.isOk() ? drained : local;
}

}  // namespace gfshim
