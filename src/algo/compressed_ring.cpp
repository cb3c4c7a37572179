#include "algo/compressed_ring.h"

#include <cstdint>
#include <vector>

namespace gfshim {
namespace {

constexpr size_t kSlotAlignBytes = 64;

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// One rank: the same values a ring would leave, without a transport. `slot` holds one segment.
void runOneRank(const RingSchedule& schedule, RingPart part, HalfFormat format, float scale,
                const float* send, float* recv, uint16_t* slot) {
  const ElementRange chunk = ringChunk(schedule.count(), 1, 0);
  for (size_t k = 0; k < schedule.segmentsPerChunk(); ++k) {
    const ElementRange range = ringSegment(chunk, schedule.segmentsPerChunk(), k);
    float* out = recv + range.offset;
    switch (part) {
      case RingPart::kReduceScatter:
        for (size_t i = 0; i < range.count; ++i) out[i] = send[range.offset + i] * scale;
        break;
      case RingPart::kAllgather:
        encodeHalf(format, out, 1.0f, slot, range.count);
        decodeHalf(format, slot, out, range.count);
        break;
      case RingPart::kAllreduce:
        encodeHalf(format, send + range.offset, scale, slot, range.count);
        decodeHalf(format, slot, out, range.count);
        break;
    }
  }
}

}  // namespace

Status runCompressedRing(const RingSchedule& schedule, RingPart part, HalfFormat format,
                         float scale, Transport& transport, Workspace& workspace, const float* send,
                         float* recv) {
  if (schedule.elementBytes() != sizeof(float)) {
    return Status::error(StatusCode::kInvalidArgument,
                         "the compressed ring needs a schedule of float elements");
  }
  const int ranks = schedule.ranks();
  const size_t segments = schedule.segmentsPerChunk();
  const size_t slotElements =
      roundUp(schedule.maxSegmentElements() * sizeof(uint16_t), kSlotAlignBytes) / sizeof(uint16_t);
  const size_t wireSlots = segments + kRingRecvDepth;
  std::byte* scratch =
      workspace.reserve((kRingRecvDepth + wireSlots) * slotElements * sizeof(uint16_t));
  if (scratch == nullptr && slotElements > 0) {
    return Status::error(StatusCode::kOutOfMemory, "cannot allocate compressed ring scratch");
  }
  uint16_t* recvSlots = reinterpret_cast<uint16_t*>(scratch);
  uint16_t* wire = recvSlots + kRingRecvDepth * slotElements;
  if (ranks == 1) {
    runOneRank(schedule, part, format, scale, send, recv, wire);
    return Status::ok();
  }

  const int next = ringNext(schedule.rank(), ranks);
  const int prev = ringPrev(schedule.rank(), ranks);
  const int steps = schedule.stepCount();
  const int allgatherStep = ranks - 1;  // the first one
  const int firstStep = part == RingPart::kAllgather ? allgatherStep : 0;
  const int endStep = part == RingPart::kReduceScatter ? allgatherStep : steps;
  const size_t firstUnit = static_cast<size_t>(firstStep) * segments;
  const size_t units = static_cast<size_t>(endStep) * segments;  // one past the last unit run

  constexpr TransferId kNone = -1;
  std::vector<TransferId>& sendIds = workspace.transferIds(units + kRingRecvDepth);
  TransferId* recvIds = sendIds.data() + units;

  auto stepOf = [segments](size_t unit) { return static_cast<int>(unit / segments); };
  auto segmentOf = [segments](size_t unit) { return unit % segments; };
  auto recvSlot = [&](size_t unit) { return recvSlots + (unit % kRingRecvDepth) * slotElements; };
  // Unit u's outgoing 16-bit segment. An allgather receive of unit u lands in wireSlot(u +
  // segments), the unit that forwards it.
  auto wireSlot = [&](size_t unit) { return wire + (unit % wireSlots) * slotElements; };

  auto waitSend = [&](size_t unit) { return waitPosted(transport, sendIds[unit]); };
  // Before unit `unit` writes its wire slot, the send of the slot's previous user must be done.
  // Every unit claims its slot in unit order, also a unit with an empty segment (the short last
  // segments of uneven chunks): otherwise the claim after it would wait only for the empty unit's
  // (absent) send, while the unit before it might still be sending from the slot.
  auto claimWireSlot = [&](size_t unit) -> Status {
    return unit >= wireSlots ? waitSend(unit - wireSlots) : Status::ok();
  };

  // Encodes the data of a unit that sends something new: the scaled input at step 0, the partial
  // sum in recv at later reduce-scatter steps, the owned chunk at the allgather's first step (which
  // the owner also rounds in place, to hold the bits every other rank will decode).
  auto encodeUnit = [&](size_t unit) -> Status {
    const int step = stepOf(unit);
    const ElementRange range = schedule.sendRange(step, segmentOf(unit));
    GFSHIM_RETURN_IF_ERROR(claimWireSlot(unit));  // even when empty: see claimWireSlot
    if (range.count == 0) return Status::ok();
    uint16_t* slot = wireSlot(unit);
    if (step == 0) {
      encodeHalf(format, send + range.offset, scale, slot, range.count);
      return Status::ok();
    }
    encodeHalf(format, recv + range.offset, 1.0f, slot, range.count);
    if (step == allgatherStep) decodeHalf(format, slot, recv + range.offset, range.count);
    return Status::ok();
  };

  auto postSendUnit = [&](size_t unit) -> Status {
    const ElementRange range = schedule.sendRange(stepOf(unit), segmentOf(unit));
    if (range.count == 0) return Status::ok();
    return transport.postSend(wireSlot(unit), range.count * sizeof(uint16_t), next, &sendIds[unit]);
  };

  auto postRecvUnit = [&](size_t unit) -> Status {
    const int step = stepOf(unit);
    const ElementRange range = schedule.recvRange(step, segmentOf(unit));
    TransferId& id = recvIds[unit % kRingRecvDepth];
    id = kNone;
    if (step >= allgatherStep) {
      GFSHIM_RETURN_IF_ERROR(claimWireSlot(unit + segments));  // even when empty
    }
    if (range.count == 0) return Status::ok();
    uint16_t* target = step < allgatherStep ? recvSlot(unit) : wireSlot(unit + segments);
    return transport.postRecv(target, range.count * sizeof(uint16_t), prev, &id);
  };

  // Units up to the allgather's first step send something new, encoded first; later allgather
  // units forward the 16 bits they received.
  auto encodeAndPostSend = [&](size_t unit) -> Status {
    if (stepOf(unit) <= allgatherStep) GFSHIM_RETURN_IF_ERROR(encodeUnit(unit));
    return postSendUnit(unit);
  };
  auto received = [&](size_t unit) {
    const int step = stepOf(unit);
    const ElementRange range = schedule.recvRange(step, segmentOf(unit));
    float* out = recv + range.offset;
    if (step < allgatherStep) {
      decodeAdd(format, recvSlot(unit), send + range.offset, scale, out, range.count);
    } else {
      decodeHalf(format, wireSlot(unit + segments), out, range.count);
    }
  };
  return runRingPipeline(firstUnit, units, segments, ranks, transport, sendIds.data(), recvIds,
                         encodeAndPostSend, postRecvUnit, received);
}

}  // namespace gfshim
