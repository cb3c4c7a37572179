#include "algo/ring_schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gfshim {
namespace {

std::vector<size_t> countsFor(int p) {
  const size_t q = static_cast<size_t>(p);
  return {0, 1, q > 1 ? q - 1 : 0, q, q + 1, 2, 3, 7, 13, 31, 97, 1021, 65537, (1u << 20) + 3};
}

TEST(RingSchedule, ChunksAndSegmentsPartitionTheBuffer) {
  for (int p = 1; p <= 17; ++p) {
    for (size_t count : countsFor(p)) {
      size_t next = 0;
      for (int c = 0; c < p; ++c) {
        const ElementRange chunk = ringChunk(count, p, c);
        ASSERT_EQ(chunk.offset, next) << "p=" << p << " count=" << count << " chunk=" << c;
        next += chunk.count;
        for (size_t segments : {size_t{1}, size_t{2}, size_t{3}, size_t{64}}) {
          size_t inner = chunk.offset;
          for (size_t k = 0; k < segments; ++k) {
            const ElementRange segment = ringSegment(chunk, segments, k);
            ASSERT_EQ(segment.offset, inner);
            inner += segment.count;
          }
          ASSERT_EQ(inner, chunk.offset + chunk.count);
        }
      }
      ASSERT_EQ(next, count) << "p=" << p << " count=" << count;
    }
  }
}

TEST(RingSchedule, SegmentCountFollowsSegmentBytesAndNeverExceedsElements) {
  // 4 ranks x 1M floats: chunks of 1 MiB; 256 KiB segments -> 4 per chunk.
  EXPECT_EQ(RingSchedule(4, 0, 1 << 20, 4, 256 << 10).segmentsPerChunk(), 4u);
  // Segments smaller than an element: one element per segment at most.
  EXPECT_EQ(RingSchedule(4, 0, 40, 8, 1).segmentsPerChunk(), 10u);
  EXPECT_EQ(RingSchedule(4, 0, 40, 8, 1).maxSegmentElements(), 1u);
  // Empty buffers still have one (empty) segment.
  EXPECT_EQ(RingSchedule(3, 0, 0, 4, 64).segmentsPerChunk(), 1u);
  EXPECT_EQ(RingSchedule(3, 0, 0, 4, 64).maxSegmentElements(), 0u);
}

TEST(RingSchedule, WhatARankReceivesIsWhatItsNeighbourSends) {
  for (int p = 1; p <= 17; ++p) {
    for (int s = 0; s < ringStepCount(p); ++s) {
      for (int r = 0; r < p; ++r) {
        const RingStep mine = ringStep(p, r, s);
        const RingStep prev = ringStep(p, ringPrev(r, p), s);
        ASSERT_EQ(mine.recvChunk, prev.sendChunk) << p << " " << s << " " << r;
        if (s + 1 < ringStepCount(p)) {
          // The pipelining invariant: a step forwards what the previous step received.
          ASSERT_EQ(ringStep(p, r, s + 1).sendChunk, mine.recvChunk);
        }
        ASSERT_EQ(mine.phase, s < p - 1 ? RingPhase::kReduceScatter : RingPhase::kAllgather);
      }
    }
  }
}

// Simulates the schedule on contribution sets: every rank must end with every chunk reduced
// from every rank's contribution exactly once, and the allgather must only copy final values.
TEST(RingSchedule, EveryRankEndsWithEveryContributionExactlyOnce) {
  for (int p = 1; p <= 17; ++p) {
    const uint32_t all = (1u << p) - 1;
    std::vector<std::vector<uint32_t>> have(static_cast<size_t>(p),
                                            std::vector<uint32_t>(static_cast<size_t>(p)));
    for (int r = 0; r < p; ++r) {
      for (int c = 0; c < p; ++c) have[static_cast<size_t>(r)][static_cast<size_t>(c)] = 1u << r;
    }
    for (int s = 0; s < ringStepCount(p); ++s) {
      const auto before = have;
      for (int r = 0; r < p; ++r) {
        const RingStep step = ringStep(p, r, s);
        const uint32_t incoming =
            before[static_cast<size_t>(ringPrev(r, p))][static_cast<size_t>(step.recvChunk)];
        uint32_t& mine = have[static_cast<size_t>(r)][static_cast<size_t>(step.recvChunk)];
        if (step.phase == RingPhase::kReduceScatter) {
          ASSERT_EQ(incoming & before[static_cast<size_t>(r)][static_cast<size_t>(step.recvChunk)],
                    0u)
              << "contribution counted twice: p=" << p << " step=" << s << " rank=" << r;
          mine = incoming | before[static_cast<size_t>(r)][static_cast<size_t>(step.recvChunk)];
        } else {
          ASSERT_EQ(incoming, all) << "allgather forwards a partial sum: p=" << p << " step=" << s;
          mine = incoming;
        }
      }
    }
    for (int r = 0; r < p; ++r) {
      for (int c = 0; c < p; ++c) {
        ASSERT_EQ(have[static_cast<size_t>(r)][static_cast<size_t>(c)], all)
            << "p=" << p << " rank=" << r << " chunk=" << c;
      }
    }
  }
}

}  // namespace
}  // namespace gfshim
