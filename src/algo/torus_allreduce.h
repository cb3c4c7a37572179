// 2D-torus allreduce (Mikami et al., arXiv 1811.05233) built from the ring on row and column
// groups of one transport.
//
//   phase 1  ring reduce-scatter along the row (X ranks): row position i ends with chunk
//            (i+1)%X of the buffer reduced over its row;
//   phase 2  ring allreduce of that chunk along the column (Y ranks), every column at once: the
//            chunk is now reduced over all X*Y ranks;
//   phase 3  ring allgather along the row: every rank ends with the whole buffer.
//
// Chunks are the ring's (sizes differ by at most one element, so counts that do not divide are
// handled without padding); column peers share a row position and so the same chunk and count.
// Every element's final value is computed once by a column ring and copied, so all ranks hold
// identical bits. Latency: 2(X-1) + 2(Y-1) steps instead of 2(XY-1). Bytes sent per rank:
// 2(X-1)/X * N along the row and 2(Y-1)/Y * N/X along the column, so only 2(Y-1)/(XY) * N per
// rank crosses nodes.
//
// runCompressedTorusAllreduce is the same composition over the compressed ring, columns included
// (algo/compressed_ring.h), for float SUM: every phase carries 16-bit values, so all the byte
// counts above halve. `scale` is applied once, by the row reduce-scatter, the only pass that reads
// the input. The column allreduce rounds each shard to 16 bits (identical bits down the column);
// the row allgather re-encodes that shard exactly, so all ranks still hold identical bits. Each
// element passes through X+Y-1 encodes (X-1 in the row chain, Y in the column ring) and 2X+Y-2
// fp32 products and sums, so with A = sum over ranks of |scale*x_r| the error is at most
// (E*u + F*eps) * A * (1 + u + eps)^E + E*eta with E = X+Y-1, F = 2X+Y-2 (terms as in
// compressed_ring.h).
#pragma once

#include "algo/reducer.h"
#include "algo/torus_grid.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "compress/half_codec.h"
#include "transport/transport.h"

namespace gfshim {

// `pieces` (1 or more, the same on every rank): the buffer is cut into that many consecutive
// parts (ring-chunk sizes) whose phases overlap: while the column lane allreduces part k, the row
// lane reduce-scatters part k+1 and gathers part k-1 (two tasks of common/task.h resumed in turn;
// row and column peers never coincide, so their messages cannot cross). So the node links idle
// only while the first part is reduce-scattered and the last gathered. Each part keeps the
// guarantees above (its own chunks: summation orders differ from one piece, bits stay identical
// on every rank). The column lane's scratch is workspace.second().
// `column`: the column pass as a ring (above) or by recursive halving and doubling
// (algo/halving_doubling.h: every element's value is still computed once and copied, so bits stay
// identical on every rank; the latency becomes 2(X-1) + about 2 log2 Y steps), or, where Y is
// not a power of two, as a torus of its own whose rows ring among b consecutive nodes and whose
// columns halve among the 2^a nodes at stride b (TorusColumn::kRingThenHalving, Y = b * 2^a:
// 2(X-1) + 2(b-1) + 2a steps, none of them moving a whole shard).
Status runTorusAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                         uint64_t segmentBytes, size_t pieces, TorusColumn column, ReduceFn reduce,
                         Transport& transport, Workspace& workspace, const void* send, void* recv);

Status runCompressedTorusAllreduce(const TorusGrid& grid, size_t count, uint64_t segmentBytes,
                                   size_t pieces, HalfFormat format, float scale,
                                   Transport& transport, Workspace& workspace, const float* send,
                                   float* recv);

}  // namespace gfshim
