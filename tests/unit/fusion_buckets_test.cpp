// Bucket packing of the lazy allreduce (engine/fusion_buckets.h): grouping by (datatype, op) in
// order of first appearance, the byte cut, oversized operations, and that every operation lands
// in exactly one bucket with the bucket's sums right.
#include "engine/fusion_buckets.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gfshim
