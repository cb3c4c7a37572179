// The GPU side of a communicator's state, and the collective setup of its NCCL communicators.
// Used by the blocking path (its CommState) and by each fusion thread (its own communicator and
// its own NCCL group: two threads never share an NCCL communicator).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "algo/torus_grid.h"
#include "common/status.h"
#include "engine/policy.h"
#include "engine/stats.h"
#include "gpu/gpu_plugin_api.h"
#include "gpu/staged_allreduce.h"
#include "topo/topology.h"

namespace gfshim {

// The GPU side of a communicator (engine/gpu_route.h, gpu/staged_allreduce.h).
struct GpuCommState {
  // Agreed at setup: some rank had the CUDA driver loaded, so engine calls agree on their route.
  bool driverOnSomeRank = false;
  std::vector<PciDevice> nodeGpus;  // hwloc's GPUs of this rank's node (NUMA placement)
  StagingArea staging;
  int stagingNumaNode = -1;
  int stagingDevice = -1;  // the device stagingNumaNode belongs to
  // The plugin's NCCL communicators (made at the first NCCL call, on `ncclDevice`).
  void* ncclGroup = nullptr;
  int ncclDevice = -1;
  // Why NCCL cannot run on this communicator, agreed by all ranks; later calls stage.
  std::string ncclUnusable;
  bool warnedNoPath = false;
  bool warnedDeclined = false;  // warnStagedAfterDecline said it once

  GpuCommState() = default;
  GpuCommState(const GpuCommState&) = delete;
  GpuCommState& operator=(const GpuCommState&) = delete;
  ~GpuCommState();
};

// This rank's side of the NCCL vote for a call whose buffers are all NCCL-placeable on `device`
// (BufferPlacements::ncclPlaceable): NCCL on (GFSHIM_NCCL, and not GFSHIM_REPRODUCIBLE for the
// floating-point types that mode covers: NCCL sums in its own order), not found unusable on this
// communicator, its group (if any) on the same device, the plugin usable there (else *why says
// why, when given), and NCCL reducing (dtype, op). Local; the caller agrees on it.
bool ncclUsableOn(const Settings& settings, const GpuCommState& gpu, int device, DType dtype,
                  RedOp op, std::string* why);

// Collective over `comm` (the shim's private communicator whose ranks are `facts`), on a call
// every rank agreed to run through NCCL: creates its NCCL communicators (world, torus row and
// column of `grid`, which may be null) on `device` unless they exist. Returns ok with *ready
// false, identically on every rank, when NCCL cannot run there (setup failed or timed out on
// some rank, GFSHIM_NCCL_TIMEOUT_SEC; two ranks share a GPU): gpu.ncclUnusable then says
// why, and the caller stages the call instead. No rank is left waiting inside NCCL's
// initialisation for a peer that gave up. An error is an MPI failure of the exchange itself.
Status ensureNcclGroup(MPI_Comm comm, const CommFacts& facts, const TorusGrid* grid,
                       GpuCommState& gpu, int device, const Settings& settings, bool* ready);

// The stats record of a lossy call or bucket of `count` elements (bytesIn bytes) that the plugin
// reduced, from what it reported.
LossyRecord ncclLossyRecord(const LossyModes& modes, uint64_t bytesIn, size_t count, int commSize,
                            const GpuCallRecord& record);

// A call (`what`: "NCCL allreduce", "NCCL fused allreduce") that the plugin declined on every
// rank (GpuCallRecord::declinedEverywhere) is staged instead: one WARN per communicator's group
// says so and why.
void warnStagedAfterDecline(GpuCommState& gpu, const char* what, const std::string& why);

// Collective over `comm`: whether any rank has the CUDA driver loaded (then GPU routes are
// agreed per call).
Status agreeDriverOnSomeRank(MPI_Comm comm, bool* anywhere);

}  // namespace gfshim
