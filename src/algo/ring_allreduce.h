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

#include "algo/reducer.h"
#include "algo/ring_schedule.h"
#include "algo/workspace.h"
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

}  // namespace gfshim
