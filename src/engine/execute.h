// Runs an engine Plan for one call over a Transport: the one place that turns a Plan into a
// schedule and executes it. MPI-free, so the threads-as-ranks tests run exactly this code.
#pragma once

#include "algo/torus_grid.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "engine/policy.h"
#include "transport/transport.h"

namespace gfshim {

// `send` equals `recv` for MPI_IN_PLACE. `grid` is required for Algo::kTorus2d and
// Algo::kHierarchical (the transport's ranks are the communicator's), ignored otherwise.
Status executePlan(const Plan& plan, const CallInfo& call, Transport& transport,
                   Workspace& workspace, const void* send, void* recv,
                   const TorusGrid* grid = nullptr);

}  // namespace gfshim
