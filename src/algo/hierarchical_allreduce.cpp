#include "algo/hierarchical_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "algo/two_lanes.h"
#include "common/trace_phase.h"
#include "transport/group_transport.h"

namespace gfshim {
namespace {

// Receives of acc(k) posted ahead of the one being reduced in the reduce chain.
constexpr size_t kChainRecvDepth = 4;

// The segments of one pass over `count` elements: the unit of transfer along a chain.
struct ChainSegments {
  ChainSegments(size_t count, size_t elementBytes, uint64_t segmentBytes)
      : elementBytes_(elementBytes),
        segmentElements_(std::max<size_t>(1, static_cast<size_t>(segmentBytes) / elementBytes)),
        count_(count) {}
  size_t count() const { return (count_ + segmentElements_ - 1) / segmentElements_; }
  size_t strideBytes() const { return segmentElements_ * elementBytes_; }
  size_t offsetBytes(size_t k) const { return k * strideBytes(); }
  size_t elements(size_t k) const {
    return std::min(segmentElements_, count_ - k * segmentElements_);
  }
  size_t bytes(size_t k) const { return elements(k) * elementBytes_; }

 private:
  size_t elementBytes_;
  size_t segmentElements_;
  size_t count_;
};

// Waits for every id of `ids` still posted; after the first error withdraws the rest instead, so
// no request outlives the call.
Status waitOrCancelAll(Transport& transport, Status status, TransferId* ids, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] == -1) continue;
    if (status.isOk()) {
      status = waitPosted(transport, ids[i]);
    } else {
      transport.cancel(ids[i]);
      ids[i] = -1;
    }
  }
  return status;
}

// Reduces `count` elements to row position 0 along the chain X-1 -> ... -> 0 (file header). The
// leader's recv holds the node's reduction afterwards; other positions' recv holds partial sums.
Status reduceToLeader(Transport& row, size_t count, size_t elementBytes, uint64_t segmentBytes,
                      ReduceFn reduce, Workspace& workspace, const std::byte* own, std::byte* out) {
  const int position = row.rank();
  if (row.size() == 1) {
    if (own != out && count > 0) std::memcpy(out, own, count * elementBytes);
    return Status::ok();
  }
  if (reduce == nullptr) {
    return Status::error(StatusCode::kUnsupported, "no reduction kernel for this datatype/op");
  }
  const ChainSegments seg(count, elementBytes, segmentBytes);
  const size_t segments = seg.count();
  std::vector<TransferId>& ids = workspace.transferIds(kChainRecvDepth + segments);
  TransferId* recvIds = ids.data();
  TransferId* sendIds = ids.data() + kChainRecvDepth;
  const int toLeader = position - 1;
  Status status;
  if (position == row.size() - 1) {
    // The chain's start: its own input, as it is.
    for (size_t k = 0; k < segments && status.isOk(); ++k) {
      status = row.postSend(own + seg.offsetBytes(k), seg.bytes(k), toLeader, &sendIds[k]);
    }
    return waitOrCancelAll(row, status, sendIds, segments);
  }
  std::byte* scratch = workspace.reserve(kChainRecvDepth * seg.strideBytes());
  if (scratch == nullptr) return Status::error(StatusCode::kOutOfMemory, "reduce chain scratch");
  auto slot = [&](size_t k) { return scratch + (k % kChainRecvDepth) * seg.strideBytes(); };
  auto postRecv = [&](size_t k) {
    return row.postRecv(slot(k), seg.bytes(k), position + 1, &recvIds[k % kChainRecvDepth]);
  };
  for (size_t k = 0; k < kChainRecvDepth && k < segments && status.isOk(); ++k) {
    status = postRecv(k);
  }
  for (size_t k = 0; k < segments && status.isOk(); ++k) {
    status = waitPosted(row, recvIds[k % kChainRecvDepth]);
    if (!status.isOk()) break;
    reduce(slot(k), own + seg.offsetBytes(k), out + seg.offsetBytes(k), seg.elements(k));
    if (k + kChainRecvDepth < segments) status = postRecv(k + kChainRecvDepth);
    if (status.isOk() && position > 0) {
      status = row.postSend(out + seg.offsetBytes(k), seg.bytes(k), toLeader, &sendIds[k]);
    }
  }
  status = waitOrCancelAll(row, status, recvIds, kChainRecvDepth);
  return waitOrCancelAll(row, status, sendIds, segments);
}

// Copies the leader's `count` elements of recv down the chain 0 -> 1 -> ... -> X-1.
Status broadcastFromLeader(Transport& row, size_t count, size_t elementBytes, uint64_t segmentBytes,
                           Workspace& workspace, std::byte* data) {
  const int position = row.rank();
  const int last = row.size() - 1;
  if (row.size() == 1) return Status::ok();
  const ChainSegments seg(count, elementBytes, segmentBytes);
  const size_t segments = seg.count();
  std::vector<TransferId>& ids = workspace.transferIds(2 * segments);
  TransferId* recvIds = ids.data();
  TransferId* sendIds = ids.data() + segments;
  Status status;
  if (position > 0) {
    for (size_t k = 0; k < segments && status.isOk(); ++k) {
      status = row.postRecv(data + seg.offsetBytes(k), seg.bytes(k), position - 1, &recvIds[k]);
    }
  }
  for (size_t k = 0; k < segments && status.isOk(); ++k) {
    if (position > 0) status = waitPosted(row, recvIds[k]);
    if (status.isOk() && position < last) {
      status = row.postSend(data + seg.offsetBytes(k), seg.bytes(k), position + 1, &sendIds[k]);
    }
  }
  status = waitOrCancelAll(row, status, recvIds, segments);
  return waitOrCancelAll(row, status, sendIds, segments);
}

// The passes of one piece of the buffer (file header).
class HierarchicalPieces {
 public:
  HierarchicalPieces(const TorusGrid& grid, size_t count, size_t elementBytes,
                     uint64_t segmentBytes, size_t pieces, ReduceFn reduce, Transport& transport,
                     const void* send, void* recv)
      : row_(transport, grid.row, grid.rowIndex),
        leaders_(transport, grid.column, grid.columnIndex),
        count_(count),
        elementBytes_(elementBytes),
        segmentBytes_(segmentBytes),
        pieces_(pieces),
        reduce_(reduce),
        send_(static_cast<const std::byte*>(send)),
        recv_(static_cast<std::byte*>(recv)) {}

  size_t pieces() const { return pieces_; }
  bool leader() const { return row_.rank() == 0; }
  bool singleNode() const { return leaders_.size() == 1; }

  Status reduce(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    const TracePhase phase("hierarchical node reduce");
    return reduceToLeader(row_, range.count, elementBytes_, segmentBytes_, reduce_, workspace,
                          send_ + range.offset * elementBytes_,
                          recv_ + range.offset * elementBytes_);
  }

  // Leaders only: the piece, reduced over the node, allreduced over the leaders in place.
  Status leadersAllreduce(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    std::byte* data = recv_ + range.offset * elementBytes_;
    const RingSchedule schedule(leaders_.size(), leaders_.rank(), range.count, elementBytes_,
                                segmentBytes_);
    const TracePhase phase("hierarchical leaders allreduce");
    return runRing(schedule, RingPart::kAllreduce, reduce_, leaders_, workspace, data, data);
  }

  Status broadcast(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    const TracePhase phase("hierarchical node broadcast");
    return broadcastFromLeader(row_, range.count, elementBytes_, segmentBytes_, workspace,
                               recv_ + range.offset * elementBytes_);
  }

 private:
  ElementRange rangeOf(size_t piece) const {
    return ringChunk(count_, static_cast<int>(pieces_), static_cast<int>(piece));
  }

  GroupTransport row_;
  GroupTransport leaders_;  // column of this rank; the leaders' when row_.rank() == 0
  size_t count_;
  size_t elementBytes_;
  uint64_t segmentBytes_;
  size_t pieces_;
  ReduceFn reduce_;
  const std::byte* send_;
  std::byte* recv_;
};

// The intra lane's order, straight through: reduce(s), then broadcast(s-2). A leader that has no
// second lane to overlap with (one piece, or one node) allreduces each piece right after its
// reduce. Every rank of a row posts the passes in this order, so each chain matches.
Status runStraight(HierarchicalPieces& passes, Workspace& workspace) {
  const size_t pieces = passes.pieces();
  for (size_t step = 0; step < pieces + 2; ++step) {
    if (step < pieces) {
      GFSHIM_RETURN_IF_ERROR(passes.reduce(step, workspace));
      if (passes.leader()) GFSHIM_RETURN_IF_ERROR(passes.leadersAllreduce(step, workspace));
    }
    if (step >= 2) GFSHIM_RETURN_IF_ERROR(passes.broadcast(step - 2, workspace));
  }
  return Status::ok();
}

// A leader with pieces to overlap: the intra lane and the leader lane (algo/two_lanes.h), so the
// NIC carries piece k while the node reduces piece k+1 and broadcasts piece k-1.
Status runLeaderLanes(HierarchicalPieces& passes, Workspace& workspace) {
  Workspace& leaderWorkspace = workspace.second();
  return runTwoLanes(
      passes.pieces(), [&](size_t piece) { return passes.reduce(piece, workspace); },
      [&](size_t piece) { return passes.leadersAllreduce(piece, leaderWorkspace); },
      [&](size_t piece) { return passes.broadcast(piece, workspace); });
}

}  // namespace

Status runHierarchicalAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                                uint64_t segmentBytes, size_t pieces, ReduceFn reduce,
                                Transport& transport, Workspace& workspace, const void* send,
                                void* recv) {
  HierarchicalPieces passes(grid, count, elementBytes, segmentBytes, std::max<size_t>(pieces, 1),
                            reduce, transport, send, recv);
  if (passes.leader() && !passes.singleNode() && passes.pieces() > 1) {
    return runLeaderLanes(passes, workspace);
  }
  return runStraight(passes, workspace);
}

}  // namespace gfshim
