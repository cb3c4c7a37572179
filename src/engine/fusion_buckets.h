// Lazy allreduce, the pure part: which queued MPI_Iallreduce operations are reduced together.
//
// A negotiation round (mpi/fusion_queue.h) agrees how many operations every rank takes from
// the head of its queue: the minimum of the ranks' queue lengths. Because every rank starts its
// Iallreduces on a communicator in the same order with matching counts, datatypes and ops, the
// first `take` operations are the same operations on every rank, and packBuckets, a function of
// their (count, datatype, op) alone, cuts them into the same buckets everywhere.
//
// Buckets: operations are grouped by (datatype, op, kind) in order of first appearance, keeping
// queue order inside a group, and a group is cut whenever the next operation would take the bucket
// past `fusionBytes`. An operation larger than `fusionBytes` gets a bucket of its own (it is never
// split), and so does one of at least `aloneBytes` (fusion only where it pays: copying it into a
// bucket and back would cost more than the one algorithm call it saves; policy.h
// fusionAloneBytes). A bucket of one operation is reduced straight from the user's buffers;
// larger buckets are packed into one contiguous buffer, reduced, and unpacked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/types.h"

namespace gfshim {

// What bucket packing needs to know of a queued operation.
struct FusibleOp {
  int64_t count = 0;
  DType dtype = DType::kByte;
  RedOp op = RedOp::kSum;
  // Operations of different kinds never share a bucket. The queue gives the float SUM operations
  // too small to be sparse under momentum correction a kind of their own (keptApartInBuckets), so
  // that a bucket with a large gradient does not make them sparse.
  uint8_t kind = 0;
  uint64_t bytes() const { return static_cast<uint64_t>(count) * dtypeBytes(dtype); }
};

struct FusionBucket {
  DType dtype = DType::kByte;
  RedOp op = RedOp::kSum;
  uint8_t kind = 0;
  std::vector<size_t> ops;  // indices into the taken operations, in queue order
  uint64_t bytes = 0;       // sum of the operations' bytes
  int64_t count = 0;        // sum of the operations' counts
};

std::vector<FusionBucket> packBuckets(const std::vector<FusibleOp>& taken, uint64_t fusionBytes,
                                      uint64_t aloneBytes = UINT64_MAX);

// The agreement rule of a round, from the agreed minimum and maximum of the ranks' queue lengths:
// every rank takes `take` = min operations from the head of its queue; `pause` when that leaves
// every queue empty (min == max), so the thread sleeps until the next MPI_Iallreduce instead of
// running a confirming round; `backOff` when some rank has posted nothing yet (min == 0 < max),
// so the next round waits a little. Agreed inputs, so every rank decides alike.
struct RoundDecision {
  int64_t take = 0;
  bool pause = false;
  bool backOff = false;
};
RoundDecision decideRound(int64_t minQueued, int64_t maxQueued);

}  // namespace gfshim
