// Rabenseifner's allreduce (Thakur, Rabenseifner and Gropp, "Optimization of collective
// communication operations in MPICH", 2005): a reduce-scatter by recursive halving, then an
// allgather by recursive doubling. Among p' ranks (a power of two) it takes 2 log2(p') steps and
// sends 2(p'-1)/p' of the buffer per rank, the ring's bytes in far fewer steps than the ring's
// 2(p-1): the column pass of the 2D torus on many nodes (algo/torus_allreduce.h), where the ring's
// latency steps dominate.
//
//   fold      p not a power of two, r = p - p': the ranks 2i and 2i+1 (i < r) pair up; the even
//             one sends its buffer to the odd one, which reduces it into its own and takes part
//             for both (2 steps of the whole buffer more: the fold and the result sent back)
//   halving   at distance 1, 2 ... p'/2 each rank sends the half of its range its partner
//             keeps and reduces the partner's copy of the half it keeps; afterwards each of the
//             p' ranks holds one range reduced over all ranks. The largest halves go to the
//             nearest partners (MPICH's order): on a fat tree that is oversubscribed above its
//             leaf switches, the farthest partners, across them, get the smallest pieces (the
//             other order, the halves to the farthest first, made the 16 MB torus on 256
//             simulated ABCI ranks 1.6x slower than with ring columns)
//   doubling  the reverse: at distance p'/2 ... 2, 1 partners swap their reduced ranges
//   unfold    the odd rank of each pair sends the result to the even one
//
// Ranges are cut in elements (lower half floor(n/2)), so counts that do not divide need no
// padding and empty ranges send nothing (both partners compute the same ranges). Every element's
// final value is computed once, by the rank that holds its range after the halving, and copied,
// so all ranks hold identical bits. Messages of one pair are exchanged one step at a time, each
// step's receive and send posted before either is waited for.
#pragma once

#include <cstddef>

#include "algo/reducer.h"
#include "algo/workspace.h"
#include "common/status.h"
#include "transport/transport.h"

namespace gfshim {

// `send` may equal `recv` (in place). Scratch: workspace.reserve of up to the whole buffer (half
// of it where the rank count is a power of two).
Status runHalvingDoublingAllreduce(size_t count, size_t elementBytes, ReduceFn reduce,
                                   Transport& transport, Workspace& workspace, const void* send,
                                   void* recv);

}  // namespace gfshim
