// Pipelined ring allreduce of fp32 SUM whose wire carries 16-bit values (fp16 or bf16): the
// ring of ring_allreduce.h with the half codec (compress/half_codec.h) at every hop.
//
// Same RingSchedule, chunks, segments, steps and receive window as runRing; only the payload
// differs. With c = chunk, "enc" = encodeHalf, "dec" = decodeHalf:
//
//   step 0 (reduce-scatter)   send enc(send[c] * scale)
//   steps 1..p-2              recv w; recv[c] = dec(w) + send[c]*scale (fp32); send enc(recv[c])
//   step p-2, last received   recv[c] = dec(w) + send[c]*scale: the owned chunk (rank+1)%p, fp32
//   allgather start           w = enc(owned); recv[owned] = dec(w); send w
//   allgather steps           recv w into scratch; recv[c] = dec(w); forward the same w
//
// The owner rounds its own chunk to dec(enc(sum)) exactly as every other rank decodes it, so all
// ranks end with identical bits (and a compressed allreduce's result is always a 16-bit value).
//
// Bytes on the wire per rank: 2(p-1)/p * N * 2 bytes, half of runRing's for floats.
//
// Rounding: every encode rounds to nearest even (unit roundoff u = 2^-11 for fp16, 2^-8 for bf16;
// fp16 also has an absolute error of at most eta = 2^-25 below 2^-14 and overflows to Inf at
// 65520, so choose `scale` to keep partial sums in range). Element i of chunk c passes through p
// encodes (the first rank's input, p-2 partial sums, the final sum) and p fp32 products plus p-1
// fp32 additions (eps = 2^-24), so with A = sum over ranks of |scale * x_r|:
//
//   |result - sum_r scale*x_r| <= (p*u + (2p-1)*eps) * A * (1 + u + eps)^p + p*eta
//
// (first-order bound, each partial sum bounded by A; tests/fake/compressed_ring_fake_test.cpp
// checks it). With scale 1, integer-valued data whose partial sums all stay within 2048 in
// magnitude (fp16; 256 for bf16) are summed exactly.
//
// Halves, as runRing's, for the 2D torus:
//   kReduceScatter  afterwards recv chunk (rank+1)%p holds the fp32 sum of scale*send over the
//                   ring (built from 16-bit partial sums, itself not rounded to 16 bits); the other
//                   chunks of recv hold intermediate values.
//   kAllgather      expects recv chunk (rank+1)%p in fp32 (already reduced and scaled: `scale` and
//                   `send` are not used); rounds it in place to dec(enc(x)) and fills every other
//                   chunk with the decoded 16-bit chunk of its owner.
// With one rank: kReduceScatter gives recv = send*scale, kAllgather rounds recv in place,
// kAllreduce both: the same values a larger ring would produce.
//
// Preconditions: schedule built for float elements (elementBytes 4) with identical parameters on
// all ranks; send and recv the same pointer (in place) or disjoint; `format` and `scale` identical
// on all ranks. Scratch, one Workspace reservation cut into two regions of 16-bit segment slots
// (slot = maxSegmentElements * 2 bytes, rounded up to 64):
//   receive slots  kRingRecvDepth of them, the reduce-scatter's incoming segments;
//   wire slots     segmentsPerChunk + kRingRecvDepth of them, slot u % count holding unit u's
//                  outgoing 16-bit segment (and, in the allgather, the incoming one it forwards)
//                  from the time it is written until its send completes.
// So about N/p * 2 bytes + 2 * kRingRecvDepth slots: a send is posted as soon as its data exist
// and is received a step (one chunk of segments) later, so a chunk's worth of 16-bit segments is
// in flight; a wire slot is reused only after waiting for the send that last used it.
#pragma once

#include "algo/ring_allreduce.h"
#include "algo/ring_schedule.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "compress/half_codec.h"
#include "transport/transport.h"

namespace gfshim {

Status runCompressedRing(const RingSchedule& schedule, RingPart part, HalfFormat format,
                         float scale, Transport& transport, Workspace& workspace, const float* send,
                         float* recv);

}  // namespace gfshim
