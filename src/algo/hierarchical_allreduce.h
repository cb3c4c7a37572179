// Leader-based hierarchical allreduce on the torus grid (algo/torus_grid.h: a row is the X ranks
// of one node, a column the i-th rank of every one of the Y nodes). Row position 0 of every node
// is its leader; the leaders form column 0.
//
//   reduce    a segmented chain along the row towards the leader: position X-1 sends its input,
//             each position i in between receives acc from i+1, computes acc OP own and sends it
//             on to i-1; the leader ends with the buffer reduced over its node;
//   leaders   ring allreduce (algo/ring_allreduce.h) along column 0: the leaders now hold the
//             buffer reduced over all X*Y ranks;
//   broadcast a segmented chain down the row: each position receives the result from i-1 into
//             its receive buffer and forwards it to i+1.
//
// A chain rather than a tree or a star: every link of the node carries the buffer once in each
// direction, so no rank (the leader least of all) receives more than N per pass, and a segment
// moves on as soon as it arrived, so a pass costs (X-1) + segments - 1 segment hops.
//
// Every element's final value is computed once, by the leaders' ring, and copied down every row,
// so all ranks hold identical bits (integer reductions exact). Bytes sent per rank inside the
// node: N for the reduce (all but the leader) and N for the broadcast (all but position X-1),
// against 2(X-1)/X * N for the torus; between nodes only the leaders send, 2(Y-1)/Y * N each,
// the same bytes per NIC as the torus's X column rings together, in one ring of N/Y messages
// instead of X rings of N/(XY). Latency: 2(X-1) chain hops plus 2(Y-1) ring steps per piece.
//
// Pipelined over `pieces` (1 or more, the same on every rank) consecutive parts of the buffer
// (ring-chunk sizes), as the torus (algo/torus_allreduce.h):
//
//   intra lane (every rank)   reduce(0) reduce(1) bcast(-) reduce(2) bcast(0) reduce(3) bcast(1)..
//   leader lane (leaders)               ring(0)            ring(1)            ring(2)  ..
//
// two tasks of common/task.h resumed in turn on the leaders (non-leaders run the intra lane
// alone, straight through). The reduce chain sends only towards the leader and the broadcast
// only away from it, and the leaders' column peers are on other nodes, so no two passes share a
// directed pair of ranks: messages of different passes cannot be matched out of order. The
// intra lane finishes reduce(k) (its sends done) before broadcast(k-2) writes piece k-2, so the
// result never lands where an input still travels. The leader lane's scratch is
// workspace.second().
//
// Preconditions: identical (grid dims, count, elementBytes, segmentBytes, pieces) on all ranks;
// send and recv either the same pointer (in place) or disjoint.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algo/reducer.h"
#include "algo/torus_grid.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "transport/transport.h"

namespace gfshim {

Status runHierarchicalAllreduce(const TorusGrid& grid, size_t count, size_t elementBytes,
                                uint64_t segmentBytes, size_t pieces, ReduceFn reduce,
                                Transport& transport, Workspace& workspace, const void* send,
                                void* recv);

}  // namespace gfshim
