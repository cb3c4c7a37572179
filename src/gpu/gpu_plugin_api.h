// The interface between libgfshim.so and its GPU plugin libgfshim_cuda.so (cuda/nccl_plugin.cpp).
//
// libgfshim.so never links CUDA or NCCL: it finds the plugin next to itself and dlopens it the
// first time a communicator is agreed to run an allreduce on GPU buffers through NCCL
// (src/engine/gpu_route.h). The plugin links the CUDA runtime statically and dlopens libnccl.so.2
// itself, so a machine without NCCL gets a clear "why" from probe() instead of a failed load.
//
// Division of work: everything MPI (agreeing on the route, creating and broadcasting the NCCL
// unique ids with PMPI on the communicator's private duplicate) stays in libgfshim.so; the
// plugin owns the NCCL communicators, its CUDA stream, device scratch and the device residuals
// of the lossy modes. Both sides are built from the same tree; abiVersion guards mixing builds.
//
// Threading: one group is used by one thread at a time (the shim serializes per communicator).
// Every entry restores the calling thread's current CUDA device before it returns.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "common/types.h"
#include "config/config.h"

namespace gfshim {

constexpr int kGpuPluginAbiVersion = 5;
constexpr size_t kNcclUniqueIdBytes = 128;  // sizeof(ncclUniqueId)

// One user communicator's NCCL communicators, made from ids the shim distributed. Row and column
// are the torus2d grid's (row = ranks of one node, column = the same local rank on every node);
// rowSize == 0 means no grid: torus calls are not made on this group.
struct GpuGroupSpec {
  int device = -1;  // CUDA device ordinal of this rank's buffers
  int worldSize = 0, worldRank = 0;
  uint8_t worldId[kNcclUniqueIdBytes] = {};
  int rowSize = 0, rowRank = 0;
  uint8_t rowId[kNcclUniqueIdBytes] = {};
  int colSize = 0, colRank = 0;
  uint8_t colId[kNcclUniqueIdBytes] = {};
  uint64_t cscMaxResidualBytes =
      0;  // device memory cap of the residuals (GFSHIM_CSC_MAX_RESIDUAL_BYTES)
  // A call whose NCCL work has not completed after this long fails, and the group's NCCL
  // communicators are aborted (GFSHIM_NCCL_TIMEOUT_SEC; 0: no deadline).
  double timeoutSec = 0;
};

// One blocking allreduce on device buffers of `device` (send == recv for MPI_IN_PLACE). Returns
// when the result is in recv (the plugin synchronizes its stream). A call that fails after its
// first NCCL operation (an error, or spec.timeoutSec passed) aborts the group's NCCL
// communicators and waits for its stream before returning, so nothing writes to the user's
// buffers afterwards; the group refuses every later call. Its stream is a non-blocking stream
// that waits, at each call's start, for the work queued so far on the legacy default stream
// (which waits for every blocking stream): the order a synchronous copy would get, without
// waiting for the other group's NCCL work on the same GPU.
struct GpuCall {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  bool torus = false;  // row ReduceScatter, column AllReduce, row AllGather (else one AllReduce)
  // Lossy modes (only for kFloat32 + kSum; the shim's policy decided them, identically on all
  // ranks):
  WireCodec codec =
      WireCodec::kNone;   // fp16/bf16 on the wire; Inf/NaN in the result redoes it exactly
  bool prescale = false;  // divide by worldSize before encoding, multiply back after
  double cscDensity = 0;  // > 0: CSC with these parameters (src/compress/csc.h)
  size_t cscChunkElements = 4096;
  int64_t cscWarmupCalls = 0;
  uintptr_t residualKey = 0;  // the user's recv address: residuals are kept per (group, key, count)
};

// What the call did, for the stats report.
struct GpuCallRecord {
  uint64_t wireBytes =
      0;  // bytes this rank sent, computed from NCCL's algorithms (ring: 2(p-1)/p of the payload)
  bool overflowRedo = false;  // fp16/bf16 result held Inf/NaN: redone exactly
  bool sparse = false;        // CSC ran sparse (false: warm-up, cap, or a peer ran dense)
  size_t selectedChunks = 0, chunks = 0;
  // With a failed call: every rank agreed that it cannot run through NCCL (some rank has no
  // device memory for its scratch) before any of its data was sent, so every rank's call failed
  // alike and the group stays usable: the caller may run it another way, on every rank.
  bool declinedEverywhere = false;
};

// One fused bucket of MPI_Iallreduce operations, all of one (dtype, op), every buffer on the
// group's device: gathered into one device buffer in one kernel launch, reduced (ring or torus;
// exact, or fp16/bf16 on the wire with the overflow redo, as GpuCall), scattered back in one
// launch. Returns when every recv holds its result (the plugin waits for its stream). send ==
// recv for MPI_IN_PLACE. CSC buckets are not fused on the GPU (the shim stages them).
struct GpuFusedOp {
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t bytes = 0;
};
struct GpuFusedCall {
  const GpuFusedOp* ops = nullptr;
  size_t opCount = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  bool torus = false;
  WireCodec codec = WireCodec::kNone;  // only for kFloat32 + kSum, as GpuCall
  bool prescale = false;
};

// How a plugin entry explains a failure: printf into the caller's why buffer (either may be
// null/0: nothing is written).
__attribute__((format(printf, 3, 4))) inline void setWhy(char* why, size_t whyBytes,
                                                         const char* format, ...) {
  if (why == nullptr || whyBytes == 0) return;
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(why, whyBytes, format, arguments);
  va_end(arguments);
}

// What groupConnectPoll reports.
enum GpuConnectState : int { kGpuConnectPending = 0, kGpuConnectDone = 1, kGpuConnectFailed = 2 };

struct GpuPluginApi {
  int abiVersion;
  // Whether NCCL (dlopened) and `device` are usable in this process; false with *why otherwise.
  bool (*probe)(int device, char* why, size_t whyBytes);
  // ncclGetUniqueId.
  bool (*uniqueId)(uint8_t id[kNcclUniqueIdBytes], char* why, size_t whyBytes);
  // Local: checks the spec, loads NCCL, and makes the group's stream and device memory on
  // spec->device, so that everything that can fail on one rank alone fails before any rank
  // enters NCCL's collective initialisation (the shim agrees on the outcome in between). On
  // failure *group is null and nothing is left behind.
  bool (*groupPrepare)(const GpuGroupSpec* spec, void** group, char* why, size_t whyBytes);
  // Collective over every rank of the spec, in two halves so that no rank ever waits inside NCCL's
  // initialisation for a peer that gave up (the shim tells the ranks each other's outcome in
  // between polls, src/mpi/nccl_setup.cpp). groupConnectStart begins NCCL's nonblocking
  // initialisation (ncclCommInitRankConfig, blocking = 0) of the world communicator;
  // groupConnectPoll advances it (then the row's, then the column's) without blocking and returns
  // one of GpuConnectState. After kFailed (*why) or a peer's failure the caller destroys the group
  // with abort = true.
  bool (*groupConnectStart)(void* group, char* why, size_t whyBytes);
  int (*groupConnectPoll)(void* group, char* why, size_t whyBytes);
  // Frees the group and its NCCL communicators: abort = true (the ranks did not all connect, or a
  // call failed) aborts them (ncclCommAbort: local, never waits for a peer), else they are
  // finalized and destroyed after the stream drained (an unfinished finalization is aborted).
  void (*groupDestroy)(void* group, bool abort);
  // Whether NCCL reduces this type with this op (the shim stages other calls).
  bool (*supports)(DType dtype, RedOp op);
  // Collective over the group's world; see GpuCall.
  bool (*allreduce)(void* group, const GpuCall* call, GpuCallRecord* record, char* why,
                    size_t whyBytes);
  // Collective over the group's world; see GpuFusedCall. *record: wire bytes and overflow redo.
  bool (*fusedAllreduce)(void* group, const GpuFusedCall* call, GpuCallRecord* record, char* why,
                         size_t whyBytes);
};

}  // namespace gfshim

// The plugin's one exported symbol.
extern "C" const gfshim::GpuPluginApi* gfshim_gpu_plugin_api();
