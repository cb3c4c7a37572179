#include "engine/gpu_route.h"

namespace gfshim {

const char* gpuRouteName(GpuRoute route) {
  switch (route) {
    case GpuRoute::kHost:
      return "host";
    case GpuRoute::kStaged:
      return "staged";
    case GpuRoute::kNccl:
      return "nccl";
    case GpuRoute::kPassthrough:
      return "passthrough";
  }
  return "?";
}

std::array<int32_t, 3> encodeGpuVote(const GpuVote& vote) {
  return {vote.ncclReady ? 1 : 0, vote.device ? -1 : 0, vote.cannotStage ? -1 : 0};
}

GpuRoute decideGpuRoute(const std::array<int32_t, 3>& minimum) {
  const bool allNcclReady = minimum[0] == 1;
  const bool anyDevice = minimum[1] == -1;
  const bool anyCannotStage = minimum[2] == -1;
  if (allNcclReady) return GpuRoute::kNccl;
  if (anyCannotStage) return GpuRoute::kPassthrough;
  return anyDevice ? GpuRoute::kStaged : GpuRoute::kHost;
}

}  // namespace gfshim
