#include "engine/fusion_buckets.h"

#include <tuple>
#include <utility>

namespace gfshim {

std::vector<FusionBucket> packBuckets(const std::vector<FusibleOp>& taken, uint64_t fusionBytes,
                                      uint64_t aloneBytes) {
  // Groups in order of first appearance; each holds the index of its open (last) bucket.
  using Key = std::tuple<DType, RedOp, uint8_t>;
  std::vector<std::pair<Key, std::vector<size_t>>> groups;
  for (size_t i = 0; i < taken.size(); ++i) {
    const Key key{taken[i].dtype, taken[i].op, taken[i].kind};
    size_t g = 0;
    while (g < groups.size() && groups[g].first != key) ++g;
    if (g == groups.size()) groups.push_back({key, {}});
    groups[g].second.push_back(i);
  }
  std::vector<FusionBucket> buckets;
  for (const auto& [key, members] : groups) {
    const auto [dtype, op, kind] = key;
    FusionBucket open;
    for (size_t index : members) {
      const uint64_t bytes = taken[index].bytes();
      if (bytes >= aloneBytes) {  // in place, without the copies in and out of a bucket
        FusionBucket alone;
        alone.dtype = dtype;
        alone.op = op;
        alone.kind = kind;
        alone.ops.push_back(index);
        alone.bytes = bytes;
        alone.count = taken[index].count;
        buckets.push_back(std::move(alone));
        continue;
      }
      if (!open.ops.empty() && open.bytes + bytes > fusionBytes) {
        buckets.push_back(std::move(open));
        open = FusionBucket();
      }
      open.dtype = dtype;
      open.op = op;
      open.kind = kind;
      open.ops.push_back(index);
      open.bytes += bytes;
      open.count += taken[index].count;
    }
    if (!open.ops.empty()) buckets.push_back(std::move(open));
  }
  return buckets;
}

RoundDecision decideRound(int64_t minQueued, int64_t maxQueued) {
  RoundDecision decision;
  decision.take = minQueued;
  decision.pause = minQueued == maxQueued;
  decision.backOff = minQueued == 0 && maxQueued > 0;
  return decision;
}

}  // namespace gfshim
