// Alpha-beta-gamma cost model of the allreduce algorithms, per link class (inside a node,
// between nodes): t = steps x (alpha + bytes / beta) on the slowest link class a step uses, plus
// the reductions, bytes / gamma (counted as not overlapped, though the ring pipelines them). It
// explains the choice between a flat ring, the 2D torus and a latency-optimal recursive
// doubling, and reproduces the step counts of Mikami et al. (3456 ranks as a 4 x 864 grid: 1732
// latency steps against 6910 for a flat ring). Pure arithmetic; `gfshim-info --model` prints it.
//
// Assumptions: ranks are numbered node by node, so a flat ring crosses each node's NIC once per
// step with N/p bytes while the node's other ranks move N/p through shared memory; the X column
// rings of the torus share their node's NIC, each moving N/(XY) bytes per step; recursive
// doubling moves and reduces the whole buffer in each of its ceil(log2 p) steps. The reduction
// term is what separates recursive doubling from a ring on two ranks (same bytes on the wire).
#pragma once

#include <cstdint>

#include "algo/torus_grid.h"
#include "topo/topology.h"

namespace gfshim {

// The default of GFSHIM_REDUCE_GBPS (80 Gbit/s; a unit test ties the two), see
// ClusterShape::reduceBytesPerSecond.
constexpr double kReduceBytesPerSecond = 10e9;
// Packing an operation into a fused bucket and back: two copies of its bytes, at about this rate
// from memory that is not in cache (the development VM's memcpy: 4-10 GB/s).
constexpr double kCopyBytesPerSecond = 5e9;
// The shim's own cost of reducing one bucket more (plan, posting, a task, the generalized
// request's completion). Measured on the development VM (bench/call_patterns, 2 ranks, Open MPI,
// one 128 KiB MPI_Iallreduce fused alone: 11-12 us more than Open MPI's own, 47-50 us against
// 36-38 us, though its ring reduces half as much and sends one rendezvous message more).
constexpr double kBucketOverheadSeconds = 10e-6;
// A message of at least kRendezvousBytes costs this much on top of its link's latency: the MPIs
// send it by rendezvous (a handshake, and on shared memory the single-copy setup by the
// receiver). Measured on the development VM with a PMPI_Sendrecv exchange between 2 ranks of one
// node: Open MPI 1.6 us at 2 KiB, 6.9 us at 8 KiB and 7.9 us at 32 KiB; MPICH 1.0 us at 2 KiB,
// 6.8 us at 32 KiB. That is what a ring's steps pay beyond the latency UCX reports (0.09 us for
// shared memory, its own small-message figure). The default of GFSHIM_RENDEZVOUS_US (a unit test
// ties the two), which a network without it sets to 0 (SimGrid's SMPI models no handshake).
constexpr double kRendezvousSeconds = 6e-6;
constexpr double kRendezvousBytes = 8192;
// What one latency step costs more where a node runs more ranks than it has CPUs: a rank waits
// until its peer is scheduled again. Calibrated with 4 ranks on the 2-core development VM
// (bench/never_slower.sh, Open MPI 4.1, two runs of 1M-16M, bench/RESULTS.md): the blocking ring
// lost or tied at 2M (0.97-1.11) and won from 4M (0.77-0.95); a lone fused MPI_Iallreduce lost at
// 2M-4M (1.03-1.21) and won from 8M, while bursts of ten 2M calls lost (1.09-1.20) and of ten 4M
// won (0.55-0.59). This figure puts the ring's crossover at ~2.5M and the lone call's at ~3.7M
// (below it every MPI_Iallreduce goes to the MPI's own, burst or not), between 2M and 4M.
// It was 40 us, calibrated on one earlier sweep where a lone 2M call won; later sweeps lost there.
// With more ranks a CPU the wait grows: from 2 ranks a CPU on, each further rank a CPU adds this
// much again (see ClusterShape::ranksPerCpu).
constexpr double kOversubscribedStepSeconds = 100e-6;

struct ClusterShape {
  int64_t ranksPerNode = 1;  // X
  int64_t nodes = 1;         // Y
  LinkCost intraNode;
  LinkCost interNode;
  // gamma: bytes of one operand reduced per second on one core. A float sum ran at 23 GB/s on
  // cache-resident 16 MB buffers on the development VM; 10 GB/s allows for memory-bound sizes.
  double reduceBytesPerSecond = kReduceBytesPerSecond;
  // The most ranks a CPU runs on any node (or host that nodes share). Above 1 every latency step
  // costs kOversubscribedStepSeconds more, and from 2 on that much for each rank a CPU beyond
  // the first: a step waits for its peer to be scheduled again, behind the other ranks on the
  // peer's CPU (calibrated at 2, checked at 4: bench/RESULTS.md). 0 or 1: not oversubscribed.
  double ranksPerCpu = 0;
  // Each message of at least kRendezvousBytes costs this much more (0: a pure alpha-beta model).
  double rendezvousSeconds = kRendezvousSeconds;
};

struct AlgorithmCost {
  int64_t latencySteps = 0;
  double seconds = 0;
};

// What every latency step costs more on `shape`'s crowded CPUs (see ClusterShape::ranksPerCpu).
double oversubscribedStepSeconds(const ClusterShape& shape);
AlgorithmCost ringCost(const ClusterShape& shape, double bytes);
// The 2D torus over `pieces` parts of the buffer whose phases overlap (algo/torus_allreduce.h):
// with rs, ag and ar one part's row reduce-scatter, row allgather and column allreduce,
// rs + ag + (pieces - 1) * max(rs + ag, ar) + ar, so the slower lane sets the pace and the other
// shows only while the first part is scattered and the last gathered. One piece: the three
// phases one after the other. latencySteps counts every part's steps.
// `column`: the column pass as a ring, 2(Y-1) steps of N/Y through the node's NIC (X ranks of
// N/(XY) each), or by recursive halving and doubling among Y' = 2^floor(log2 Y) nodes, steps of
// N/2, N/4 ... N/Y' through the NIC, each twice, plus two of N where Y' < Y (the fold), or, for
// Y = b * 2^a with b odd, a ring among b nodes (2(b-1) steps of N/b) and the halving of N/b among
// 2^a (no fold).
AlgorithmCost torusCost(const ClusterShape& shape, double bytes, int64_t pieces = 1,
                        TorusColumn column = TorusColumn::kRing);
// The number of pieces (1, 2, 4, ... 64) with the lowest torusCost: more pieces hide more of the
// shorter lane and pay more latency steps.
int64_t bestTorusPieces(const ClusterShape& shape, double bytes,
                        TorusColumn column = TorusColumn::kRing);
// The leader-based hierarchical allreduce over `pieces` parts (algo/hierarchical_allreduce.h):
// per part a reduce chain along the node (rd), a broadcast chain (bc), both of X-1 + s - 1 hops
// of one segment (s = the part's segments of `segmentBytes`), and the leaders' ring (ar: 2(Y-1)
// steps of N/Y through the node's NIC, the leader reducing (Y-1) N/Y), overlapped as the torus's
// lanes: rd + bc + (pieces - 1) * max(rd + bc, ar) + ar. Its NIC carries the torus's bytes in a
// step count of the torus's, so it can beat the torus only where a node's chain costs less than
// the torus's row passes: the model says never where a torus grid exists (each rank sends N per
// chain against (X-1)/X N per row pass, and the leader reduces the whole part), which is why
// auto picks it only where its prediction is strictly lower.
AlgorithmCost hierarchicalCost(const ClusterShape& shape, double bytes, double segmentBytes,
                               int64_t pieces = 1);
// The number of pieces (1, 2, 4, ... 64) with the lowest hierarchicalCost.
int64_t bestHierarchicalPieces(const ClusterShape& shape, double bytes, double segmentBytes);
AlgorithmCost recursiveDoublingCost(const ClusterShape& shape, double bytes);
// The smallest operation worth reducing alone rather than packed into a fused bucket: where two
// copies of it cost more than one more ring (its 2(p-1) latency steps on the slowest link class
// the ring crosses, plus kBucketOverheadSeconds).
uint64_t fusionAloneBytes(const ClusterShape& shape);
// The smallest MPI_Iallreduce worth fusing when it turns out to be alone: where the fused path
// (the round's agreement, ceil(log2 p) latency steps; kBucketOverheadSeconds; the ring) is
// predicted faster than the MPI's own algorithm (recursive doubling). UINT64_MAX: never.
uint64_t fusedAloneBeatsNativeBytes(const ClusterShape& shape);

}  // namespace gfshim
