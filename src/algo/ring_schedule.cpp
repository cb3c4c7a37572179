#include "algo/ring_schedule.h"

#include <algorithm>

namespace gfshim {

ElementRange ringChunk(size_t count, int ranks, int chunk) {
  const size_t p = static_cast<size_t>(ranks);
  const size_t c = static_cast<size_t>(chunk);
  const size_t base = count / p;
  const size_t extra = count % p;
  return {c * base + std::min(c, extra), base + (c < extra ? 1 : 0)};
}

ElementRange ringSegment(ElementRange chunk, size_t segments, size_t segment) {
  const size_t base = chunk.count / segments;
  const size_t extra = chunk.count % segments;
  return {chunk.offset + segment * base + std::min(segment, extra),
          base + (segment < extra ? 1 : 0)};
}

RingStep ringStep(int ranks, int rank, int step) {
  const int p = ranks;
  if (step < p - 1) {
    return {RingPhase::kReduceScatter, ((rank - step) % p + p) % p,
            ((rank - step - 1) % p + p) % p};
  }
  const int t = step - (p - 1);
  return {RingPhase::kAllgather, ((rank + 1 - t) % p + p) % p, ((rank - t) % p + p) % p};
}

RingSchedule::RingSchedule(int ranks, int rank, size_t count, size_t elementBytes,
                           size_t segmentBytes)
    : ranks_(ranks), rank_(rank), count_(count), elementBytes_(elementBytes) {
  const size_t maxChunkElements = ringChunk(count, ranks, 0).count;
  const size_t chunkBytes = maxChunkElements * elementBytes;
  size_t segments = segmentBytes == 0 ? 1 : (chunkBytes + segmentBytes - 1) / segmentBytes;
  segments = std::max<size_t>(1, std::min(segments, maxChunkElements));
  segmentsPerChunk_ = segments;
  maxSegmentElements_ = (maxChunkElements + segments - 1) / segments;
}

ElementRange RingSchedule::sendRange(int s, size_t segment) const {
  return ringSegment(ringChunk(count_, ranks_, step(s).sendChunk), segmentsPerChunk_, segment);
}

ElementRange RingSchedule::recvRange(int s, size_t segment) const {
  return ringSegment(ringChunk(count_, ranks_, step(s).recvChunk), segmentsPerChunk_, segment);
}

}  // namespace gfshim
