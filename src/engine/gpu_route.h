// Which way an engine bucket (a blocking allreduce, or a fused bucket) with GPU buffers goes,
// decided identically on every rank.
//
// A buffer's memory kind is a rank-local fact (DESIGN.md, invariant 2): one rank may hold a
// gradient on its GPU while another holds it in host memory, and only some ranks may have NCCL.
// Host memory and staged device memory run the same host algorithm and need no agreement by
// themselves, but NCCL and the pass-through change the wire pattern, and the staging pipeline
// cuts the call into blocks. So on a communicator where some rank has the CUDA driver loaded
// (agreed once at its setup), every engine call first agrees on its route with one tiny MIN
// allreduce of the ranks' votes:
//
//   every rank has device buffers, NCCL and its GPU ready               -> NCCL
//   else some rank has a device buffer it may not stage (GFSHIM_GPU_STAGING=0)
//                                                                        -> pass through to the
//                                              MPI, every rank (which must then be CUDA-aware)
//   else some rank has a device buffer                                   -> staged (host algorithm
//                                              in blocks; host ranks run the same blocks in place)
//   else                                                                 -> host
//
// On a communicator where no rank had the driver at setup, a device buffer that appears later is
// staged as one block: the same wire pattern as the host ranks', so no agreement is needed.
#pragma once

#include <array>
#include <cstdint>

namespace gfshim {

enum class GpuRoute : uint8_t { kHost, kStaged, kNccl, kPassthrough };
const char* gpuRouteName(GpuRoute route);

// This rank's facts about one call.
struct GpuVote {
  bool device = false;       // its send or receive buffer is device memory
  bool ncclReady = false;    // both buffers on one GPU, NCCL usable for it and for this dtype/op
  bool cannotStage = false;  // a device buffer and GFSHIM_GPU_STAGING=0
};

// The vote as MIN-reducible integers: {ncclReady, -device, -cannotStage}.
std::array<int32_t, 3> encodeGpuVote(const GpuVote& vote);
// The route from the element-wise MIN of every rank's encodeGpuVote.
GpuRoute decideGpuRoute(const std::array<int32_t, 3>& minimum);

}  // namespace gfshim
