// CorrectedBuffers (engine/corrected_buffers.h): which engines keep a momentum velocity for a
// buffer, so that a buffer corrected on two paths, or handed to the MPI, is seen. And the
// LossyState that claims through it (engine/lossy_allreduce.h).
#include "engine/corrected_buffers.h"

#include <gtest/gtest.h>

#include "config/config.h"
#include "engine/lossy_allreduce.h"
#include "engine/policy.h"

namespace gfshim {
namespace {

constexpr uintptr_t kBuffer = 0x10000;
const int kEngineA = 0, kEngineB = 0;

TEST(CorrectedBuffers, OneOwnerClaimingAgainIsNotShared) {
  CorrectedBuffers buffers;
  EXPECT_FALSE(buffers.claim(kBuffer, 100, &kEngineA));
  EXPECT_FALSE(buffers.claim(kBuffer, 100, &kEngineA));
  EXPECT_TRUE(buffers.corrected(kBuffer, 100));
  EXPECT_FALSE(buffers.corrected(kBuffer, 50));       // another size: another buffer
  EXPECT_FALSE(buffers.corrected(kBuffer + 4, 100));  // another address
}

TEST(CorrectedBuffers, ASecondOwnerOfTheSameBufferIsSeenAnotherSizeIsNot) {
  CorrectedBuffers buffers;
  EXPECT_FALSE(buffers.claim(kBuffer, 100, &kEngineA));
  EXPECT_FALSE(buffers.claim(kBuffer, 50, &kEngineB));
  EXPECT_TRUE(buffers.claim(kBuffer, 100, &kEngineB));
  EXPECT_TRUE(buffers.claim(kBuffer, 100, &kEngineA));
}

TEST(CorrectedBuffers, ReleaseForgetsOnlyThatOwnerAndANewSizeReplacesTheOwnersOld) {
  CorrectedBuffers buffers;
  EXPECT_FALSE(buffers.claim(kBuffer, 100, &kEngineA));
  EXPECT_TRUE(buffers.claim(kBuffer, 100, &kEngineB));
  buffers.release(&kEngineA);
  EXPECT_TRUE(buffers.corrected(kBuffer, 100));  // B's
  EXPECT_FALSE(buffers.claim(kBuffer, 100, &kEngineB));
  EXPECT_FALSE(buffers.claim(kBuffer, 200, &kEngineB));  // reallocated: B keeps 200 now
  EXPECT_FALSE(buffers.corrected(kBuffer, 100));
  buffers.release(&kEngineB);
  EXPECT_FALSE(buffers.corrected(kBuffer, 200));
}

// Velocities follow buffers with momentum correction and address keys only; a LossyState made
// under such settings claims, and gives its claims back when it goes.
TEST(CorrectedBuffers, OnlyAddressKeyedVelocitiesAreClaimedAndAStateReleasesOnDestruction) {
  Settings s;
  EXPECT_FALSE(velocitiesFollowBuffers(s));
  s.cscMomentum = 0.9;
  EXPECT_FALSE(velocitiesFollowBuffers(s));  // no density: no correction
  s.cscDensity = 0.1;
  EXPECT_TRUE(velocitiesFollowBuffers(s));
  s.cscKey = CscKey::kPosition;
  EXPECT_FALSE(velocitiesFollowBuffers(s));
  EXPECT_FALSE(LossyState(s).claimsVelocities);
  s.cscKey = CscKey::kAddress;
  constexpr uintptr_t kOwnBuffer = 0x7000;
  {
    LossyState state(s);
    EXPECT_TRUE(state.claimsVelocities);
    EXPECT_FALSE(CorrectedBuffers::process().claim(kOwnBuffer, 8, &state));
    EXPECT_TRUE(CorrectedBuffers::process().corrected(kOwnBuffer, 8));
  }
  EXPECT_FALSE(CorrectedBuffers::process().corrected(kOwnBuffer, 8));
}

}  // namespace
}  // namespace gfshim
