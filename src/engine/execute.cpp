#include "engine/execute.h"

#include "algo/chain_allreduce.h"
#include "algo/hierarchical_allreduce.h"
#include "algo/reducer.h"
#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "algo/torus_allreduce.h"

namespace gfshim {

Status executePlan(const Plan& plan, const CallInfo& call, Transport& transport,
                   Workspace& workspace, const void* send, void* recv, const TorusGrid* grid) {
  if (plan.route != Route::kEngine || !call.dtype || !call.op || call.count < 0) {
    return Status::error(StatusCode::kInternal, "executePlan called without an engine plan");
  }
  static constexpr const char* kLabels[] = {"allreduce", "ring allreduce", "torus2d allreduce",
                                            "chain allreduce (reproducible)",
                                            "hierarchical allreduce"};
  transport.operationStarted(
      {kLabels[static_cast<int>(plan.algo)], call.count, *call.dtype, *call.op});
  switch (plan.algo) {
    case Algo::kRing: {
      const RingSchedule schedule(transport.size(), transport.rank(),
                                  static_cast<size_t>(call.count), dtypeBytes(*call.dtype),
                                  plan.segmentBytes);
      return runRing(schedule, RingPart::kAllreduce, cpuReduceFn(*call.dtype, *call.op), transport,
                     workspace, send, recv);
    }
    case Algo::kTorus2d:
      if (grid == nullptr)
        return Status::error(StatusCode::kInternal, "torus2d plan without a grid");
      return runTorusAllreduce(*grid, static_cast<size_t>(call.count), dtypeBytes(*call.dtype),
                               plan.segmentBytes, plan.torusPieces, plan.torusColumn,
                               cpuReduceFn(*call.dtype, *call.op), transport, workspace, send,
                               recv);
    case Algo::kChain:
      return runChainAllreduce(static_cast<size_t>(call.count), dtypeBytes(*call.dtype),
                               plan.segmentBytes, cpuReduceFn(*call.dtype, *call.op), transport,
                               workspace, send, recv);
    case Algo::kHierarchical:
      if (grid == nullptr) {
        return Status::error(StatusCode::kInternal, "hierarchical plan without a grid");
      }
      return runHierarchicalAllreduce(
          *grid, static_cast<size_t>(call.count), dtypeBytes(*call.dtype), plan.segmentBytes,
          plan.torusPieces, cpuReduceFn(*call.dtype, *call.op), transport, workspace, send, recv);
    case Algo::kNone:
      break;
  }
  return Status::error(StatusCode::kInternal, "plan names no algorithm");
}

}  // namespace gfshim
