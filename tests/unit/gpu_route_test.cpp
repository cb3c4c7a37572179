// The GPU route of a call is decided from the MIN over every rank's vote (engine/gpu_route.h):
// the rule must give every combination of ranks the documented route.
#include "engine/gpu_route.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace gfshim {
namespace {

GpuRoute routeOf(const std::vector<GpuVote>& votes) {
  std::array<int32_t, 3> minimum = encodeGpuVote(votes.front());
  for (const GpuVote& vote : votes) {
    const std::array<int32_t, 3> encoded = encodeGpuVote(vote);
    for (size_t i = 0; i < minimum.size(); ++i) minimum[i] = std::min(minimum[i], encoded[i]);
  }
  return decideGpuRoute(minimum);
}

constexpr GpuVote kHostRank{false, false, false};
constexpr GpuVote kNcclRank{true, true, false};
constexpr GpuVote kStagingRank{true, false, false};
constexpr GpuVote kNoPathRank{true, false, true};   // GFSHIM_GPU_STAGING=0, no NCCL
constexpr GpuVote kNcclOnlyRank{true, true, true};  // GFSHIM_GPU_STAGING=0, NCCL ready

TEST(GpuRoute, HostRanksOnlyStayOnTheHost) {
  EXPECT_EQ(routeOf({kHostRank}), GpuRoute::kHost);
  EXPECT_EQ(routeOf({kHostRank, kHostRank, kHostRank}), GpuRoute::kHost);
}

TEST(GpuRoute, NcclOnlyWhenEveryRankIsReady) {
  EXPECT_EQ(routeOf({kNcclRank, kNcclRank}), GpuRoute::kNccl);
  EXPECT_EQ(routeOf({kNcclRank, kStagingRank}), GpuRoute::kStaged);
  EXPECT_EQ(routeOf({kNcclRank, kHostRank, kNcclRank}), GpuRoute::kStaged);
}

TEST(GpuRoute, AnyDeviceBufferWithoutNcclEverywhereIsStaged) {
  EXPECT_EQ(routeOf({kStagingRank}), GpuRoute::kStaged);
  EXPECT_EQ(routeOf({kHostRank, kStagingRank}), GpuRoute::kStaged);
}

TEST(GpuRoute, ARankThatMayNotStageSendsEveryRankToTheMpiUnlessAllHaveNccl) {
  EXPECT_EQ(routeOf({kNoPathRank}), GpuRoute::kPassthrough);
  EXPECT_EQ(routeOf({kNcclRank, kNoPathRank, kNcclRank}), GpuRoute::kPassthrough);
  EXPECT_EQ(routeOf({kHostRank, kHostRank, kNoPathRank}), GpuRoute::kPassthrough);
  EXPECT_EQ(routeOf({kNcclOnlyRank, kNcclOnlyRank}), GpuRoute::kNccl);
  EXPECT_EQ(routeOf({kNcclOnlyRank, kHostRank}), GpuRoute::kPassthrough);
}

TEST(GpuRoute, TheOrderOfRanksDoesNotMatter) {
  std::vector<GpuVote> votes{kHostRank, kNcclRank, kStagingRank, kNcclRank};
  std::sort(votes.begin(), votes.end(),
            [](const GpuVote& a, const GpuVote& b) { return a.ncclReady < b.ncclReady; });
  const GpuRoute first = routeOf(votes);
  while (std::next_permutation(votes.begin(), votes.end(), [](const GpuVote& a, const GpuVote& b) {
    return encodeGpuVote(a) < encodeGpuVote(b);
  })) {
    EXPECT_EQ(routeOf(votes), first);
  }
  EXPECT_EQ(first, GpuRoute::kStaged);
}

}  // namespace
}  // namespace gfshim
