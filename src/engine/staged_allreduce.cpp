#include "engine/staged_allreduce.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

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
    for (void*& event : events_) {
      if (event != nullptr) driver_->destroyEvent(context_, event);
      event = nullptr;
    }
    if (stream_ != nullptr) driver_->destroyStream(context_, stream_);
    if (pinned_) driver_->unpinHost(memory_);
  }
  stream_ = nullptr;
  pinned_ = false;
  if (memory_ != nullptr) munmap(memory_, mappedBytes_);
  memory_ = nullptr;
  mappedBytes_ = 0;
  slotBytes_ = 0;
  slots_[0] = slots_[1] = nullptr;
}

Status StagingArea::prepare(const CudaDriver& driver, void* context, size_t slotBytes,
                            int numaNode) {
  if (driver_ == &driver && context_ == context && slotBytes <= slotBytes_) return Status::ok();
  release();
  driver_ = &driver;
  context_ = context;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (std::max<size_t>(slotBytes, 1) + page - 1) / page * page;
  void* memory =
      mmap(nullptr, 2 * rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    return Status::error(StatusCode::kOutOfMemory, "no host memory for the staging slots");
  }
  memory_ = static_cast<std::byte*>(memory);
  mappedBytes_ = 2 * rounded;
  slotBytes_ = rounded;
  slots_[0] = memory_;
  slots_[1] = memory_ + rounded;
  preferNumaNode(memory_, mappedBytes_, numaNode);
  const Status pin = driver.pinHost(memory_, mappedBytes_);
  pinned_ = pin.isOk();
  if (!pinned_) {
    // Pageable slots still work; the asynchronous copies then run synchronously.
    GFSHIM_WARN(kEngine, "staging: %s; staging copies use pageable memory", pin.message().c_str());
  }
  GFSHIM_RETURN_IF_ERROR(driver.createStream(context, &stream_));
  for (void*& event : events_) GFSHIM_RETURN_IF_ERROR(driver.createEvent(context, &event));
  return Status::ok();
}

Status runStagedAllreduce(const CudaDriver* driver, StagingArea& area, int numaNode,
                          const StagedCall& call, size_t blockElements, const BlockReduce& reduce) {
  if (call.count == 0) return Status::ok();
  blockElements = std::max<size_t>(1, std::min(blockElements, call.count));
  const bool sendOnDevice = call.sendAt.kind == MemKind::kDevice;
  const bool recvOnDevice = call.recvAt.kind == MemKind::kDevice;
  const size_t blocks = (call.count + blockElements - 1) / blockElements;
  const auto firstOf = [&](size_t block) { return block * blockElements; };
  const auto elementsOf = [&](size_t block) {
    return std::min(blockElements, call.count - firstOf(block));
  };
  const auto bytesAt = [&](const void* base, size_t block) {
    return static_cast<const std::byte*>(base) + firstOf(block) * call.elementBytes;
  };
  if (!sendOnDevice && !recvOnDevice) {
    for (size_t block = 0; block < blocks; ++block) {
      GFSHIM_RETURN_IF_ERROR(reduce(bytesAt(call.send, block),
                                    const_cast<std::byte*>(bytesAt(call.recv, block)),
                                    firstOf(block), elementsOf(block)));
    }
    return Status::ok();
  }
  if (driver == nullptr) {
    return Status::error(StatusCode::kInternal, "a device buffer without the CUDA driver");
  }
  void* context = sendOnDevice ? call.sendAt.context : call.recvAt.context;
  GFSHIM_RETURN_IF_ERROR(
      area.prepare(*driver, context, blockElements * call.elementBytes, numaNode));
  void* stream = area.stream();
  const auto stageIn = [&](size_t block) -> Status {
    if (!sendOnDevice) return Status::ok();
    GFSHIM_RETURN_IF_ERROR(driver->copyToHostAsync(context, area.slot(block),
                                                   bytesAt(call.send, block),
                                                   elementsOf(block) * call.elementBytes, stream));
    return driver->recordEvent(context, area.event(block), stream);
  };
  Status status = stageIn(0);
  for (size_t block = 0; block < blocks && status.isOk(); ++block) {
    if (block + 1 < blocks) status = stageIn(block + 1);
    if (!status.isOk()) break;
    // The slot's latest event: its in-copy, or the out-copy of the block two before.
    if (block >= 2 || sendOnDevice) status = driver->waitEvent(context, area.event(block));
    if (!status.isOk()) break;
    const void* in = sendOnDevice ? area.slot(block) : bytesAt(call.send, block);
    void* out = recvOnDevice ? area.slot(block) : const_cast<std::byte*>(bytesAt(call.recv, block));
    status = reduce(in, out, firstOf(block), elementsOf(block));
    if (!status.isOk() || !recvOnDevice) continue;
    status =
        driver->copyToDeviceAsync(context, const_cast<std::byte*>(bytesAt(call.recv, block)),
                                  area.slot(block), elementsOf(block) * call.elementBytes, stream);
    if (status.isOk()) status = driver->recordEvent(context, area.event(block), stream);
  }
  // Drain the stream even after an error: no copy may still write into a slot or the user's buffer.
  const Status drained = driver->synchronize(context, stream);
  return status.isOk() ? drained : status;
}

}  // namespace gfshim
