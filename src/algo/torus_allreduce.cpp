#include "algo/torus_allreduce.h"

#include "algo/compressed_ring.h"
#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "common/trace_phase.h"
#include "transport/group_transport.h"

namespace gfshim {
namespace {

// The three ring passes of the torus over row and column views of `transport`. `runPass(schedule,
// part, ring, send, recv)` runs one pass with the plain or the compressed ring; the part tells
// which pass it is (kReduceScatter: row, reads the input; kAllreduce: column; kAllgather: row).
template <typename RunPass>
Status runTorusPasses(const TorusGrid& grid, size_t count, size_t elementBytes,
                      uint64_t segmentBytes, Transport& transport, const void* send, void* recv,
                      RunPass&& runPass) {
  GroupTransport row(transport, grid.row, grid.rowIndex);
  GroupTransport column(transport, grid.column, grid.columnIndex);
  const RingSchedule rowSchedule(row.size(), row.rank(), count, elementBytes, segmentBytes);
  {
    const TracePhase phase("torus row reduce-scatter");
    GFSHIM_RETURN_IF_ERROR(runPass(rowSchedule, RingPart::kReduceScatter, row, send, recv));
  }

  const ElementRange shard = ringChunk(count, row.size(), ringNext(row.rank(), row.size()));
  void* shardData = static_cast<std::byte*>(recv) + shard.offset * elementBytes;
  const RingSchedule columnSchedule(column.size(), column.rank(), shard.count, elementBytes,
                                    segmentBytes);
  {
    const TracePhase phase("torus column allreduce");
    GFSHIM_RETURN_IF_ERROR(
        runPass(columnSchedule, RingPart::kAllreduce, column, shardData, shardData));
  }
  const TracePhase phase("torus row allgather");
  return runPass(rowSchedule, RingPart::kAllgather, row, recv, recv);
}

}  // namespace

Status runTorusAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                         uint64_t segmentBytes, ReduceFn reduce, Transport& transport,
                         Workspace& workspace, const void* send, void* recv) {
  return runTorusPasses(
      grid, count, elementBytes, segmentBytes, transport, send, recv,
      [&](const RingSchedule& schedule, RingPart part, Transport& ring, const void* in, void* out) {
        return runRing(schedule, part, reduce, ring, workspace, in, out);
      });
}

Status runCompressedTorusAllreduce(const TorusGrid& grid, size_t count, uint64_t segmentBytes,
                                   HalfFormat format, float scale, Transport& transport,
                                   Workspace& workspace, const float* send, float* recv) {
  return runTorusPasses(
      grid, count, sizeof(float), segmentBytes, transport, send, recv,
      [&](const RingSchedule& schedule, RingPart part, Transport& ring, const void* in, void* out) {
        // The row reduce-scatter reads the input and scales it; the column sums scaled values.
        const float passScale = part == RingPart::kReduceScatter ? scale : 1.0f;
        return runCompressedRing(schedule, part, format, passScale, ring, workspace,
                                 static_cast<const float*>(in), static_cast<float*>(out));
      });
}

}  // namespace gfshim
