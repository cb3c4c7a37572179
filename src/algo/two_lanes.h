// The two lanes of a pipelined allreduce over a grid (algo/torus_allreduce.h,
// algo/hierarchical_allreduce.h): the buffer in `pieces` consecutive parts, each through three
// passes, first(k) and last(k) inside the node, middle(k) between nodes.
//
//   node lane      first(0) first(1) first(2) last(0) first(3) last(1) ...  last(pieces-1)
//   network lane            middle(0)         middle(1)        middle(2) ...
//
// The node lane runs first(k), then last(k-2) once middle(k-2) is done; the network lane runs
// middle(k) once first(k) is done. The lanes are tasks (common/task.h) of one thread resumed in
// turn: a wait inside one tests and yields, so the node links carry a piece between nodes while
// the node moves the next. Each lane keeps one order on every rank and the two never exchange
// messages between the same pair of ranks (the callers' precondition), so their messages cannot
// cross. The network lane's phases go to the tracer's second lane (GFSHIM_TIMELINE).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "common/task.h"
#include "common/trace_phase.h"

namespace gfshim {

// first, middle, last: Status(size_t piece). Returns the first failure of either lane.
template <typename First, typename Middle, typename Last>
Status runTwoLanes(size_t pieces, First first, Middle middle, Last last) {
  size_t firstDone = 0, middleDone = 0;  // pieces done, in order
  bool failed = false;
  Status nodeStatus, networkStatus;
  // Gives way until `ready` holds or a lane failed; false after a failure.
  auto await = [&failed](const auto& ready) {
    while (!failed && !ready()) Task::yield();
    return !failed;
  };
  Task nodeLane([&] {
    for (size_t step = 0; step < pieces + 2 && !failed; ++step) {
      if (step < pieces) {
        nodeStatus = first(step);
        if (!nodeStatus.isOk()) break;
        firstDone = step + 1;
      }
      if (step >= 2) {
        const size_t piece = step - 2;
        if (!await([&] { return middleDone > piece; })) return;
        nodeStatus = last(piece);
        if (!nodeStatus.isOk()) break;
      }
    }
    if (!nodeStatus.isOk()) failed = true;
  });
  Task networkLane([&] {
    for (size_t piece = 0; piece < pieces; ++piece) {
      if (!await([&] { return firstDone > piece; })) return;
      networkStatus = middle(piece);
      if (!networkStatus.isOk()) {
        failed = true;
        return;
      }
      middleDone = piece + 1;
    }
  });
  PhaseTracer* const nodeTracer = threadPhaseTracer();
  PhaseTracer* const networkTracer = nodeTracer != nullptr ? nodeTracer->secondLane() : nullptr;
  bool nodeDone = false, networkDone = false;
  while (!nodeDone || !networkDone) {
    if (!nodeDone) nodeDone = nodeLane.resume();
    if (!networkDone) {
      setThreadPhaseTracer(networkTracer);
      networkDone = networkLane.resume();
      setThreadPhaseTracer(nodeTracer);
    }
    Task::yield();  // inside a task (a fused bucket): its driver progresses too
  }
  GFSHIM_RETURN_IF_ERROR(nodeStatus);
  return networkStatus;
}

}  // namespace gfshim
