// The pure part of the lazy allreduce (engine/fusion_buckets.h): bucket packing (grouping by
// (datatype, op) in order of first appearance, the byte cut, oversized operations, every
// operation in exactly one bucket with the bucket's sums right) and the agreement rule of a
// round, also run as a protocol over ranks that post the same calls at random times.
#include "engine/fusion_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

namespace gfshim {
namespace {

std::vector<std::vector<size_t>> members(const std::vector<FusionBucket>& buckets) {
  std::vector<std::vector<size_t>> out;
  for (const FusionBucket& bucket : buckets) out.push_back(bucket.ops);
  return out;
}

TEST(FusionBuckets, EmptyQueueGivesNoBuckets) { EXPECT_TRUE(packBuckets({}, 1024).empty()); }

TEST(FusionBuckets, GroupsByDatatypeAndOpInOrderOfFirstAppearance) {
  const std::vector<FusibleOp> ops = {{10, DType::kFloat32, RedOp::kSum},
                                      {10, DType::kFloat64, RedOp::kSum},
                                      {10, DType::kFloat32, RedOp::kSum},
                                      {10, DType::kFloat32, RedOp::kMax},
                                      {10, DType::kFloat64, RedOp::kSum}};
  const auto buckets = packBuckets(ops, 1 << 20);
  EXPECT_EQ(members(buckets), (std::vector<std::vector<size_t>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(buckets[0].dtype, DType::kFloat32);
  EXPECT_EQ(buckets[1].dtype, DType::kFloat64);
  EXPECT_EQ(buckets[2].op, RedOp::kMax);
  EXPECT_EQ(buckets[1].bytes, 160u);
  EXPECT_EQ(buckets[1].count, 20);
}

TEST(FusionBuckets, CutsAtFusionBytesAndGivesOversizedOperationsTheirOwnBucket) {
  // 4-byte floats, fusion limit 100 bytes.
  const std::vector<FusibleOp> ops = {{10, DType::kFloat32, RedOp::kSum},   // 40 B
                                      {15, DType::kFloat32, RedOp::kSum},   // 60 B: 100, fits
                                      {1, DType::kFloat32, RedOp::kSum},    // 4 B: cut
                                      {100, DType::kFloat32, RedOp::kSum},  // 400 B: alone
                                      {2, DType::kFloat32, RedOp::kSum}};
  const auto buckets = packBuckets(ops, 100);
  EXPECT_EQ(members(buckets), (std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(buckets[0].bytes, 100u);
  EXPECT_EQ(buckets[2].bytes, 400u);
}

TEST(FusionBuckets, OperationsOfAtLeastAloneBytesGetABucketOfTheirOwn) {
  // 4-byte floats, fusion limit 1000 bytes, alone from 200 bytes.
  const std::vector<FusibleOp> ops = {{10, DType::kFloat32, RedOp::kSum},   // 40 B
                                      {50, DType::kFloat32, RedOp::kSum},   // 200 B: alone
                                      {20, DType::kFloat32, RedOp::kSum},   // 80 B: with the first
                                      {49, DType::kFloat32, RedOp::kSum}};  // 196 B: fused too
  const auto buckets = packBuckets(ops, 1000, 200);
  EXPECT_EQ(members(buckets), (std::vector<std::vector<size_t>>{{1}, {0, 2, 3}}));
  EXPECT_EQ(buckets[0].bytes, 200u);
  EXPECT_EQ(buckets[1].count, 79);
}

// Under momentum correction the dense operations (kind 1) never share a bucket with the sparse
// ones (kind 0), whatever the room left in the open bucket.
TEST(FusionBuckets, OperationsOfDifferentKindsNeverShareABucket) {
  const std::vector<FusibleOp> ops = {{100, DType::kFloat32, RedOp::kSum, 0},
                                      {10, DType::kFloat32, RedOp::kSum, 1},
                                      {100, DType::kFloat32, RedOp::kSum, 0},
                                      {10, DType::kFloat32, RedOp::kSum, 1}};
  const auto buckets = packBuckets(ops, 1 << 20);
  EXPECT_EQ(members(buckets), (std::vector<std::vector<size_t>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(buckets[0].kind, 0);
  EXPECT_EQ(buckets[1].kind, 1);
  EXPECT_EQ(buckets[1].count, 20);
}

TEST(FusionBuckets, RandomQueuesCoverEveryOperationOnceWithinTheLimit) {
  std::mt19937_64 rng(42);
  const DType types[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kUInt8};
  const RedOp redOps[] = {RedOp::kSum, RedOp::kMax};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<FusibleOp> ops(rng() % 60);
    for (FusibleOp& op : ops) op = {static_cast<int64_t>(rng() % 5000), types[rng() % 4], redOps[rng() % 2]};
    const uint64_t limit = 1 + rng() % 20000;
    const auto buckets = packBuckets(ops, limit);
    std::vector<int> seen(ops.size(), 0);
    for (const FusionBucket& bucket : buckets) {
      ASSERT_FALSE(bucket.ops.empty());
      uint64_t bytes = 0;
      int64_t count = 0;
      for (size_t k = 0; k < bucket.ops.size(); ++k) {
        const FusibleOp& op = ops[bucket.ops[k]];
        ++seen[bucket.ops[k]];
        EXPECT_EQ(op.dtype, bucket.dtype);
        EXPECT_EQ(op.op, bucket.op);
        if (k > 0) {
          EXPECT_LT(bucket.ops[k - 1], bucket.ops[k]);  // queue order inside a bucket
        }
        bytes += op.bytes();
        count += op.count;
      }
      EXPECT_EQ(bytes, bucket.bytes);
      EXPECT_EQ(count, bucket.count);
      if (bucket.ops.size() > 1) {
        EXPECT_LE(bucket.bytes, limit);
      }
    }
    for (int times : seen) EXPECT_EQ(times, 1);
    // A function of the shapes alone: the same queue packs the same way (every rank agrees).
    EXPECT_EQ(members(packBuckets(ops, limit)), members(buckets));
  }
}

TEST(FusionRounds, TakeTheMinimumPauseWhenEveryQueueIsEmptiedBackOffWhenARankHasNothing) {
  const RoundDecision idle = decideRound(0, 0);
  EXPECT_EQ(idle.take, 0);
  EXPECT_TRUE(idle.pause);
  EXPECT_FALSE(idle.backOff);
  const RoundDecision even = decideRound(3, 3);
  EXPECT_EQ(even.take, 3);
  EXPECT_TRUE(even.pause);
  const RoundDecision uneven = decideRound(2, 5);
  EXPECT_EQ(uneven.take, 2);
  EXPECT_FALSE(uneven.pause);
  EXPECT_FALSE(uneven.backOff);
  const RoundDecision late = decideRound(0, 4);
  EXPECT_EQ(late.take, 0);
  EXPECT_FALSE(late.pause);
  EXPECT_TRUE(late.backOff);
}

// Ranks post the same sequence of calls, each at its own random pace, while rounds run on the
// agreed minimum and maximum (a round happens whenever some rank's thread is awake: a paused
// thread wakes when its queue is not empty). Every rank must take the same calls in the same
// rounds and in posting order, nothing may be taken twice or lost, and the rounds must end
// paused once everything is posted.
TEST(FusionRounds, RanksPostingAtRandomTimesTakeTheSameCallsInOrder) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int ranks = 1 + static_cast<int>(rng() % 6);
    const int calls = static_cast<int>(rng() % 40);
    std::vector<int> posted(static_cast<size_t>(ranks), 0), taken(static_cast<size_t>(ranks), 0);
    std::vector<std::vector<std::vector<int>>> rounds(static_cast<size_t>(ranks));
    bool paused = true;
    for (int step = 0; step < 100000; ++step) {
      for (int r = 0; r < ranks; ++r) {  // each rank posts 0..2 more calls
        int& p = posted[static_cast<size_t>(r)];
        p = std::min(calls, p + static_cast<int>(rng() % 3));
      }
      bool anyQueued = false;
      int64_t least = INT64_MAX, most = 0;
      for (int r = 0; r < ranks; ++r) {
        const int64_t queued = posted[static_cast<size_t>(r)] - taken[static_cast<size_t>(r)];
        anyQueued |= queued > 0;
        least = std::min(least, queued);
        most = std::max(most, queued);
      }
      if (paused && !anyQueued) {
        bool allPosted = true;
        for (int p : posted) allPosted &= p == calls;
        if (allPosted) break;
        continue;  // every thread sleeps until a call is posted
      }
      const RoundDecision round = decideRound(least, most);
      for (int r = 0; r < ranks; ++r) {
        std::vector<int> ids;
        for (int64_t k = 0; k < round.take; ++k) ids.push_back(taken[static_cast<size_t>(r)]++);
        rounds[static_cast<size_t>(r)].push_back(ids);
      }
      paused = round.pause;
    }
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(taken[static_cast<size_t>(r)], calls) << "trial " << trial << " rank " << r;
      EXPECT_EQ(rounds[static_cast<size_t>(r)], rounds[0]) << "trial " << trial << " rank " << r;
    }
    int expected = 0;
    for (const std::vector<int>& ids : rounds[0]) {
      for (int id : ids) EXPECT_EQ(id, expected++);
    }
  }
}

}  // namespace
}  // namespace gfshim
