#include "algo/ring_allreduce.h"

#include <cstring>
#include <optional>
#include <vector>

#include "common/trace_phase.h"

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

  auto waitSend = [&](size_t unit) -> Status {
    if (sendIds[unit] == kNone) return Status::ok();
    const TransferId id = sendIds[unit];
    sendIds[unit] = kNone;
    return transport.wait(id);
  };

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

  Status status;
  for (size_t k = 0; k < segments && status.isOk(); ++k) status = postSendUnit(firstUnit + k);
  for (size_t u = firstUnit; u < firstUnit + kRingRecvDepth && u < units && status.isOk(); ++u) {
    status = postRecvUnit(u);
  }
  // For GFSHIM_TIMELINE: the pipelined loop crosses from reduce-scatter to allgather at one unit.
  const size_t allgatherUnit = static_cast<size_t>(ranks - 1) * segments;
  std::optional<TracePhase> phase;
  phase.emplace(firstUnit < allgatherUnit ? "ring reduce-scatter" : "ring allgather");
  for (size_t u = firstUnit; u < units && status.isOk(); ++u) {
    if (u == allgatherUnit && u != firstUnit) {
      phase.reset();
      phase.emplace("ring allgather");
    }
    const int step = stepOf(u);
    const ElementRange range = schedule.recvRange(step, segmentOf(u));
    const TransferId id = recvIds[u % kRingRecvDepth];
    recvIds[u % kRingRecvDepth] = kNone;
    if (id != kNone) {
      status = transport.wait(id);
      if (!status.isOk()) break;
      if (schedule.step(step).phase == RingPhase::kReduceScatter) {
        const size_t offset = range.offset * elementBytes;
        reduce(scratch + (u % kRingRecvDepth) * slotBytes, sendBytes + offset, recvBytes + offset,
               range.count);
      }
    }
    if (u + kRingRecvDepth < units) status = postRecvUnit(u + kRingRecvDepth);
    if (status.isOk() && step + 1 < endStep) status = postSendUnit(u + segments);
  }
  if (!status.isOk()) {
    // Withdraw whatever is still posted, so no request outlives the call: a receive left behind
    // would write into scratch or the user's buffer later, or match the next call's messages.
    for (size_t i = 0; i < kRingRecvDepth; ++i) {
      if (recvIds[i] != kNone) transport.cancel(recvIds[i]);
    }
    for (size_t u = firstUnit; u < units; ++u) {
      if (sendIds[u] != kNone) transport.cancel(sendIds[u]);
    }
    return status;
  }
  for (size_t u = firstUnit; u < units && status.isOk(); ++u) status = waitSend(u);
  return status;
}

}  // namespace gfshim
