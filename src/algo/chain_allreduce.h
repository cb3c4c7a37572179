// The pipelined chain allreduce of the bitwise-reproducible mode (GFSHIM_REPRODUCIBLE=1).
//
// Every element is reduced in rank order: rank 0's value travels down the chain 0 -> 1 -> ... ->
// p-1 and each rank applies acc = acc OP own, so every element of the result is
//
//   ((x0 OP x1) OP x2) ... OP x(p-1)
//
// whatever the segment size, the element's offset inside a fused bucket, or the algorithm the
// policy would otherwise have chosen: the same bits on every run with the same rank count. Rank
// p-1 then holds the result, which travels back up the chain p-1 -> ... -> 0. Both directions
// run at once, segment by segment:
//
//   rank i, segment k:  receive acc(k) from i-1; recv(k) = acc(k) OP own(k); send recv(k) to i+1
//                       later: receive the result of k from i+1 into recv(k); send it on to i-1
//
// Cost: every link carries the data once in each direction (N bytes each way, against the ring's
// 2(p-1)/p N in one direction), but the pipeline fills over 2(p-1) segment hops and every rank but
// rank 0 reduces all N bytes. Where ranks are numbered node by node only one link per node
// boundary crosses the network.
//
// Preconditions: identical (count, elementBytes, segmentBytes) on all ranks; send and recv either
// the same pointer (in place) or disjoint.
#pragma once

#include <cstddef>

#include "algo/reducer.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "transport/transport.h"

namespace gfshim {

Status runChainAllreduce(size_t count, size_t elementBytes, size_t segmentBytes, ReduceFn reduce,
                         Transport& transport, Workspace& workspace, const void* send, void* recv);

}  // namespace gfshim
