// Executes a RingSchedule over a Transport: the pipelined ring allreduce.
//
// Pipeline (segments k of one step overlap with segments of the next):
//
//   recv window:  [u][u+1]..[u+depth-1]   receives posted ahead, each into a scratch slot
//   unit u=(s,k): wait recv u -> reduce scratch with own data into recv buffer -> send (s+1,k)
//
//            step s     |  step s+1   |  step s+2
//   seg 0:  recv,reduce | send ...    |
//   seg 1:     recv,reduce | send ... |
//   seg 2:        recv,reduce | send  |
//
// So the reduction of one segment overlaps the transfer of the following ones, and a segment
// travels on as soon as it is ready rather than after the whole chunk. No full copy of the input
// is made: reduce-scatter steps compute recv = received OP send directly, allgather steps receive
// straight into the user's receive buffer.
//
// Preconditions: identical (count, elementBytes, segmentBytes) on all ranks; send and recv either
// the same pointer (in place) or disjoint. Cost: 2(p-1) steps; each rank sends and receives
// 2(p-1)/p * count * elementBytes bytes; scratch is depth * maxSegmentElements * elementBytes.
#pragma once

#include <optional>

#include "algo/reducer.h"
#include "algo/ring_schedule.h"
#include "algo/workspace.h"
#include "common/trace_phase.h"
#include "common/status.h"
#include "transport/transport.h"

namespace gfshim {

// Receives posted ahead of the one being reduced; enough to keep a link busy while one segment
// is reduced, small enough to keep the scratch at a few segments.
constexpr size_t kRingRecvDepth = 4;

// Which steps of the schedule to run. The halves are what the 2D torus composes:
//   kReduceScatter: afterwards recv holds the complete reduction of chunk (rank+1)%p; the rest of
//                   recv holds intermediate values.
//   kAllgather:     expects chunk (rank+1)%p of recv complete (send is not read) and fills in
//                   every other chunk.
enum class RingPart { kAllreduce, kReduceScatter, kAllgather };

Status runRing(const RingSchedule& schedule, RingPart part, ReduceFn reduce, Transport& transport,
               Workspace& workspace, const void* send, void* recv);

// Shared by the ring executors (this one and algo/compressed_ring.h).
//
// The ring's phases for a tracer (common/trace_phase.h, GFSHIM_TIMELINE): the pipelined loop
// crosses from reduce-scatter to allgather at unit `allgatherUnit` = (p-1) * segments.
class RingPhaseTrace {
 public:
  RingPhaseTrace(size_t firstUnit, size_t allgatherUnit)
      : firstUnit_(firstUnit), allgatherUnit_(allgatherUnit) {
    phase_.emplace(firstUnit < allgatherUnit ? "ring reduce-scatter" : "ring allgather");
  }
  void atUnit(size_t unit) {
    if (unit != allgatherUnit_ || unit == firstUnit_) return;
    phase_.reset();
    phase_.emplace("ring allgather");
  }

 private:
  size_t firstUnit_;
  size_t allgatherUnit_;
  std::optional<TracePhase> phase_;
};

// Waits for a posted transfer and marks its id not posted (-1); nothing to do when it is -1.
inline Status waitPosted(Transport& transport, TransferId& id) {
  if (id == -1) return Status::ok();
  const TransferId posted = id;
  id = -1;
  return transport.wait(posted);
}

// After an error: withdraws every receive still posted in the window `recvIds` and every send of
// the units [firstUnit, endUnit) still posted, so that no request outlives the call (a receive
// left behind would write into scratch or the user's buffer later, or match the next call's
// messages). -1 marks an id that is not posted.
void cancelPosted(Transport& transport, const TransferId* recvIds, size_t recvWindow,
                  const TransferId* sendIds, size_t firstUnit, size_t endUnit);

// The pipeline itself, over the units u = step * segments + segment in [firstUnit, units):
//
//   post the sends of the first step's units; post receives of the first kRingRecvDepth units
//   for each unit u: wait for its receive, received(u); post the receive of u + depth;
//                    unless u's step is the last, post the send of u + segments
//   wait for every send (on an error: cancel everything still posted instead)
//
// The executor's hooks: postSend(unit) and postRecv(unit) return a Status and record the
// TransferId in sendIds[unit] / recvIds[unit % kRingRecvDepth] (-1 when nothing was posted);
// received(unit) consumes a received segment. So only what travels and how a segment is consumed
// differ between the executors, not the order of transfers.
template <typename PostSend, typename PostRecv, typename Received>
Status runRingPipeline(size_t firstUnit, size_t units, size_t segments, int ranks,
                       Transport& transport, TransferId* sendIds, TransferId* recvIds,
                       PostSend&& postSend, PostRecv&& postRecv, Received&& received) {
  const size_t lastStepUnit = units - segments;  // units from here on send nothing further
  Status status;
  for (size_t k = 0; k < segments && status.isOk(); ++k) status = postSend(firstUnit + k);
  for (size_t u = firstUnit; u < firstUnit + kRingRecvDepth && u < units && status.isOk(); ++u) {
    status = postRecv(u);
  }
  RingPhaseTrace phases(firstUnit, static_cast<size_t>(ranks - 1) * segments);
  for (size_t u = firstUnit; u < units && status.isOk(); ++u) {
    phases.atUnit(u);
    const TransferId id = recvIds[u % kRingRecvDepth];
    recvIds[u % kRingRecvDepth] = -1;
    if (id != -1) {
      status = transport.wait(id);
      if (!status.isOk()) break;
      received(u);
    }
    if (u + kRingRecvDepth < units) status = postRecv(u + kRingRecvDepth);
    if (status.isOk() && u < lastStepUnit) status = postSend(u + segments);
  }
  if (!status.isOk()) {
    cancelPosted(transport, recvIds, kRingRecvDepth, sendIds, firstUnit, units);
    return status;
  }
  for (size_t u = firstUnit; u < units && status.isOk(); ++u) {
    status = waitPosted(transport, sendIds[u]);
  }
  return status;
}

}  // namespace gfshim
