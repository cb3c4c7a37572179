#include "algo/ring_allreduce.h"

#include <cstring>
#include <vector>

namespace gfshim {

Status runRing(const RingSchedule& schedule, RingPart part, ReduceFn reduce, Transport& transport,
               Workspace& workspace, const void* send, void* recv) {
  const size_t elementBytes = schedule.elementBytes();
  const auto* sendBytes = static_cast<const std::byte*>(send);
  auto* recvBytes = static_cast<std::byte*>(recv);
  const int ranks = schedule.ranks();
  if (ranks == 1) {
    if (part != RingPart::kAllgather && send != recv && schedule.count() > 0) {
      std::memcpy(recv, send, schedule.count() * elementBytes);
    }
    return Status::ok();
  }
  if (reduce == nullptr) {
    return Status::error(StatusCode::kUnsupported, "no reduction kernel for this datatype/op");
  }

  const int next = ringNext(schedule.rank(), ranks);
  const int prev = ringPrev(schedule.rank(), ranks);
  const size_t segments = schedule.segmentsPerChunk();
  const int steps = schedule.stepCount();
  const int firstStep = part == RingPart::kAllgather ? ranks - 1 : 0;
  const int endStep = part == RingPart::kReduceScatter ? ranks - 1 : steps;
  const size_t firstUnit = static_cast<size_t>(firstStep) * segments;
  const size_t units = static_cast<size_t>(endStep) * segments;  // one past the last unit run
  const size_t slotBytes = schedule.maxSegmentElements() * elementBytes;
  std::byte* scratch = workspace.reserve(kRingRecvDepth * slotBytes);
  if (scratch == nullptr && slotBytes > 0) {
    return Status::error(StatusCode::kOutOfMemory, "cannot allocate ring scratch");
  }

  constexpr TransferId kNone = -1;
  std::vector<TransferId>& sendIds = workspace.transferIds(units + kRingRecvDepth);
  TransferId* recvIds = sendIds.data() + units;

  auto stepOf = [segments](size_t unit) { return static_cast<int>(unit / segments); };
  auto segmentOf = [segments](size_t unit) { return unit % segments; };

  auto waitSend = [&](size_t unit) { return waitPosted(transport, sendIds[unit]); };

  // Step 0 sends the own contribution straight from the input; later steps send what the
  // previous step produced in the receive buffer.
  auto postSendUnit = [&](size_t unit) -> Status {
    const int step = stepOf(unit);
    const ElementRange range = schedule.sendRange(step, segmentOf(unit));
    if (range.count == 0) return Status::ok();
    const std::byte* source = (step == 0 ? sendBytes : recvBytes) + range.offset * elementBytes;
    return transport.postSend(source, range.count * elementBytes, next, &sendIds[unit]);
  };

  auto postRecvUnit = [&](size_t unit) -> Status {
    const int step = stepOf(unit);
    const ElementRange range = schedule.recvRange(step, segmentOf(unit));
    TransferId& id = recvIds[unit % kRingRecvDepth];
    id = kNone;
    if (range.count == 0) return Status::ok();
    std::byte* target;
    if (schedule.step(step).phase == RingPhase::kReduceScatter) {
      target = scratch + (unit % kRingRecvDepth) * slotBytes;
    } else {
      // Allgather step t overwrites the chunk this rank sent at step t: that send must be done.
      const size_t sentUnit = static_cast<size_t>(step - (ranks - 1)) * segments + segmentOf(unit);
      GFSHIM_RETURN_IF_ERROR(waitSend(sentUnit));
      target = recvBytes + range.offset * elementBytes;
    }
    return transport.postRecv(target, range.count * elementBytes, prev, &id);
  };

  auto received = [&](size_t unit) {
    const int step = stepOf(unit);
    if (schedule.step(step).phase != RingPhase::kReduceScatter) return;  // already in place
    const ElementRange range = schedule.recvRange(step, segmentOf(unit));
    const size_t offset = range.offset * elementBytes;
    reduce(scratch + (unit % kRingRecvDepth) * slotBytes, sendBytes + offset, recvBytes + offset,
           range.count);
  };
  return runRingPipeline(firstUnit, units, segments, ranks, transport, sendIds.data(), recvIds,
                         postSendUnit, postRecvUnit, received);
}

void cancelPosted(Transport& transport, const TransferId* recvIds, size_t recvWindow,
                  const TransferId* sendIds, size_t firstUnit, size_t endUnit) {
  for (size_t i = 0; i < recvWindow; ++i) {
    if (recvIds[i] != -1) transport.cancel(recvIds[i]);
  }
  for (size_t u = firstUnit; u < endUnit; ++u) {
    if (sendIds[u] != -1) transport.cancel(sendIds[u]);
  }
}

}  // namespace gfshim
