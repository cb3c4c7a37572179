// Ring allreduce schedule: pure rank and range arithmetic, no data and no transport.
//
// Terms (as in Gloo): the buffer of `count` elements is cut into p *chunks*, one per rank; each
// chunk is cut into the same number of *segments*, the unit of transfer and of pipelining.
//
//   chunk c   = elements [c*q + min(c, m), ...) with q = count / p, m = count % p: the first m
//               chunks hold one element more; chunks may be empty when count < p.
//   step s    = 0 .. 2(p-1)-1. Steps 0..p-2 are the reduce-scatter: rank r sends chunk (r-s)
//               to r+1 and receives chunk (r-s-1) from r-1, which it combines with its own.
//               Steps p-1..2p-3 are the allgather: with t = s-(p-1), rank r sends chunk
//               (r+1-t) and receives chunk (r-t), which it stores.
//   The chunk received at step s is the chunk sent at step s+1, so segment k of step s+1 can
//   leave as soon as segment k of step s has arrived and been reduced: the executor pipelines
//   across steps at segment granularity.
//
// After the reduce-scatter rank r holds the complete reduction of chunk r+1, computed once in
// ring order starting at rank c for chunk c; the allgather only copies it. Every rank therefore
// ends with identical bits. Each rank sends and receives 2(p-1)/p * count elements.
#pragma once

#include <cstddef>

namespace gfshim {

struct ElementRange {
  size_t offset = 0;
  size_t count = 0;
};

enum class RingPhase { kReduceScatter, kAllgather };

struct RingStep {
  RingPhase phase;
  int sendChunk;
  int recvChunk;
};

inline int ringNext(int rank, int ranks) { return (rank + 1) % ranks; }
inline int ringPrev(int rank, int ranks) { return (rank + ranks - 1) % ranks; }

ElementRange ringChunk(size_t count, int ranks, int chunk);
// Segment `segment` of `segments` equal parts of `chunk` (the first ones one element larger).
ElementRange ringSegment(ElementRange chunk, size_t segments, size_t segment);
inline int ringStepCount(int ranks) { return 2 * (ranks - 1); }
RingStep ringStep(int ranks, int rank, int step);

// Everything one rank needs to run one ring allreduce.
class RingSchedule {
 public:
  RingSchedule(int ranks, int rank, size_t count, size_t elementBytes, size_t segmentBytes);

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  size_t count() const { return count_; }
  size_t elementBytes() const { return elementBytes_; }
  int stepCount() const { return ringStepCount(ranks_); }
  size_t segmentsPerChunk() const { return segmentsPerChunk_; }
  size_t maxSegmentElements() const { return maxSegmentElements_; }

  RingStep step(int s) const { return ringStep(ranks_, rank_, s); }
  ElementRange sendRange(int s, size_t segment) const;
  ElementRange recvRange(int s, size_t segment) const;

 private:
  int ranks_;
  int rank_;
  size_t count_;
  size_t elementBytes_;
  size_t segmentsPerChunk_;
  size_t maxSegmentElements_;
};

}  // namespace gfshim
