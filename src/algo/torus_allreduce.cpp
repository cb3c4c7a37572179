#include "algo/torus_allreduce.h"

#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "transport/group_transport.h"

namespace gfshim {

Status runTorusAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                         uint64_t segmentBytes, ReduceFn reduce, Transport& transport,
                         Workspace& workspace, const void* send, void* recv) {
  GroupTransport row(transport, grid.row, grid.rowIndex);
  GroupTransport column(transport, grid.column, grid.columnIndex);
  const RingSchedule rowSchedule(row.size(), row.rank(), count, elementBytes, segmentBytes);
  GFSHIM_RETURN_IF_ERROR(
      runRing(rowSchedule, RingPart::kReduceScatter, reduce, row, workspace, send, recv));

  const ElementRange shard = ringChunk(count, row.size(), ringNext(row.rank(), row.size()));
  void* shardData = static_cast<std::byte*>(recv) + shard.offset * elementBytes;
  const RingSchedule columnSchedule(column.size(), column.rank(), shard.count, elementBytes,
                                    segmentBytes);
  GFSHIM_RETURN_IF_ERROR(runRing(columnSchedule, RingPart::kAllreduce, reduce, column, workspace,
                                 shardData, shardData));

  return runRing(rowSchedule, RingPart::kAllgather, reduce, row, workspace, recv, recv);
}

}  // namespace gfshim
