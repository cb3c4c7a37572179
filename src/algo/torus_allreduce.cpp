#include "algo/torus_allreduce.h"

#include "algo/compressed_ring.h"
#include "algo/halving_doubling.h"
#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "algo/two_lanes.h"
#include "common/trace_phase.h"
#include "transport/group_transport.h"

namespace gfshim {
namespace {

// One piece of the buffer through one pass of the torus: `runPass(schedule, part, ring, workspace,
// send, recv)` runs it with the plain or the compressed ring; the part tells which pass it is
// (kReduceScatter: row, reads the input; kAllreduce: column; kAllgather: row).
template <typename RunPass>
class TorusPieces {
 public:
  TorusPieces(const TorusGrid& grid, size_t count, size_t elementBytes, uint64_t segmentBytes,
              size_t pieces, Transport& transport, const void* send, void* recv, RunPass& runPass)
      : row_(transport, grid.row, grid.rowIndex),
        column_(transport, grid.column, grid.columnIndex),
        count_(count),
        elementBytes_(elementBytes),
        segmentBytes_(segmentBytes),
        pieces_(pieces),
        send_(static_cast<const std::byte*>(send)),
        recv_(static_cast<std::byte*>(recv)),
        runPass_(runPass) {}

  size_t pieces() const { return pieces_; }

  Status rowReduceScatter(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    const RingSchedule schedule(row_.size(), row_.rank(), range.count, elementBytes_,
                                segmentBytes_);
    const TracePhase phase("torus row reduce-scatter");
    return runPass_(schedule, RingPart::kReduceScatter, row_, workspace,
                    send_ + range.offset * elementBytes_, recv_ + range.offset * elementBytes_);
  }

  Status columnAllreduce(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    const ElementRange shard =
        ringChunk(range.count, row_.size(), ringNext(row_.rank(), row_.size()));
    std::byte* shardData = recv_ + (range.offset + shard.offset) * elementBytes_;
    const RingSchedule schedule(column_.size(), column_.rank(), shard.count, elementBytes_,
                                segmentBytes_);
    const TracePhase phase("torus column allreduce");
    return runPass_(schedule, RingPart::kAllreduce, column_, workspace, shardData, shardData);
  }

  Status rowAllgather(size_t piece, Workspace& workspace) {
    const ElementRange range = rangeOf(piece);
    const RingSchedule schedule(row_.size(), row_.rank(), range.count, elementBytes_,
                                segmentBytes_);
    std::byte* data = recv_ + range.offset * elementBytes_;
    const TracePhase phase("torus row allgather");
    return runPass_(schedule, RingPart::kAllgather, row_, workspace, data, data);
  }

 private:
  // The piece's elements: ring-chunk sizes, so they differ by at most one.
  ElementRange rangeOf(size_t piece) const {
    return ringChunk(count_, static_cast<int>(pieces_), static_cast<int>(piece));
  }

  GroupTransport row_;
  GroupTransport column_;
  size_t count_;
  size_t elementBytes_;
  uint64_t segmentBytes_;
  size_t pieces_;
  const std::byte* send_;
  std::byte* recv_;
  RunPass& runPass_;
};

// The torus over `pieces` consecutive parts of the buffer, its phases overlapped piece by piece
// (algo/two_lanes.h): a row lane runs reduce-scatter(k), then allgather(k-2); a column lane runs
// allreduce(k) once reduce-scatter(k) is done. Row peers share a node and column peers do not, so
// the two lanes never exchange messages between the same pair of ranks. One piece: the three
// passes one after the other, no task.
template <typename RunPass>
Status runTorusPieces(TorusPieces<RunPass>& torus, Workspace& workspace) {
  if (torus.pieces() <= 1) {
    GFSHIM_RETURN_IF_ERROR(torus.rowReduceScatter(0, workspace));
    GFSHIM_RETURN_IF_ERROR(torus.columnAllreduce(0, workspace));
    return torus.rowAllgather(0, workspace);
  }
  Workspace& columnWorkspace = workspace.second();
  return runTwoLanes(
      torus.pieces(), [&](size_t piece) { return torus.rowReduceScatter(piece, workspace); },
      [&](size_t piece) { return torus.columnAllreduce(piece, columnWorkspace); },
      [&](size_t piece) { return torus.rowAllgather(piece, workspace); });
}

// The column pass as a torus of its own (TorusColumn::kRingThenHalving): the column's members in
// rows of b consecutive ones, reduced by ring, and columns at stride b, by halving and doubling.
Status runRingThenHalvingAllreduce(size_t count, size_t elementBytes, uint64_t segmentBytes,
                                   ReduceFn reduce, Transport& column, Workspace& workspace,
                                   const void* send, void* recv) {
  const ColumnSplit split = columnSplit(column.size());
  const std::optional<TorusGrid> grid =
      torusGridFromDims(column.rank(), column.size(), {split.ringNodes, split.halvingNodes});
  return runTorusAllreduce(*grid, count, elementBytes, segmentBytes, 1,
                           TorusColumn::kHalvingDoubling, reduce, column, workspace, send, recv);
}

}  // namespace

Status runTorusAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                         uint64_t segmentBytes, size_t pieces, TorusColumn column, ReduceFn reduce,
                         Transport& transport, Workspace& workspace, const void* send, void* recv) {
  auto runPass = [&](const RingSchedule& schedule, RingPart part, Transport& peers,
                     Workspace& scratch, const void* in, void* out) {
    if (part == RingPart::kAllreduce && column == TorusColumn::kHalvingDoubling) {
      return runHalvingDoublingAllreduce(schedule.count(), elementBytes, reduce, peers, scratch, in,
                                         out);
    }
    if (part == RingPart::kAllreduce && column == TorusColumn::kRingThenHalving) {
      return runRingThenHalvingAllreduce(schedule.count(), elementBytes, segmentBytes, reduce,
                                         peers, scratch, in, out);
    }
    return runRing(schedule, part, reduce, peers, scratch, in, out);
  };
  TorusPieces torus(grid, count, elementBytes, segmentBytes, pieces, transport, send, recv,
                    runPass);
  return runTorusPieces(torus, workspace);
}

Status runCompressedTorusAllreduce(const TorusGrid& grid, size_t count, uint64_t segmentBytes,
                                   size_t pieces, HalfFormat format, float scale,
                                   Transport& transport, Workspace& workspace, const float* send,
                                   float* recv) {
  auto runPass = [&](const RingSchedule& schedule, RingPart part, Transport& ring,
                     Workspace& scratch, const void* in, void* out) {
    // The row reduce-scatter reads the input and scales it; the column sums scaled values.
    const float passScale = part == RingPart::kReduceScatter ? scale : 1.0f;
    return runCompressedRing(schedule, part, format, passScale, ring, scratch,
                             static_cast<const float*>(in), static_cast<float*>(out));
  };
  TorusPieces torus(grid, count, sizeof(float), segmentBytes, pieces, transport, send, recv,
                    runPass);
  return runTorusPieces(torus, workspace);
}

}  // namespace gfshim
