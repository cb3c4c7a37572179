#include "algo/chain_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/trace_phase.h"

namespace gfshim {
namespace {

// Receives of acc(k) posted ahead of the one being reduced.
constexpr size_t kChainRecvDepth = 4;

// The transfers of one rank's chain, indexed by segment; -1: not posted.
struct ChainTransfers {
  TransferId* accIn;      // [kChainRecvDepth], from rank - 1, slot k % depth
  TransferId* accOut;     // [segments], to rank + 1
  TransferId* resultIn;   // [segments], from rank + 1
  TransferId* resultOut;  // [segments], to rank - 1

  // After an error: withdraws everything still posted, so no request outlives the call.
  void cancelAll(Transport& transport, size_t segments) const {
    auto cancel = [&](TransferId* ids, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        if (ids[i] != -1) transport.cancel(ids[i]);
        ids[i] = -1;
      }
    };
    cancel(accIn, kChainRecvDepth);
    cancel(accOut, segments);
    cancel(resultIn, segments);
    cancel(resultOut, segments);
  }
};

Status waitAndClear(Transport& transport, TransferId& id) {
  if (id == -1) return Status::ok();
  const TransferId posted = id;
  id = -1;
  return transport.wait(posted);
}

}  // namespace

Status runChainAllreduce(size_t count, size_t elementBytes, size_t segmentBytes, ReduceFn reduce,
                         Transport& transport, Workspace& workspace, const void* send, void* recv) {
  const int p = transport.size();
  const int rank = transport.rank();
  const size_t bytes = count * elementBytes;
  const auto* own = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (p == 1 || count == 0) {
    if (send != recv && bytes > 0) std::memcpy(out, own, bytes);
    return Status::ok();
  }
  const TracePhase phase("chain allreduce (reproducible)");
  const size_t segmentElements = std::max<size_t>(1, segmentBytes / elementBytes);
  const size_t segmentStride = segmentElements * elementBytes;
  const size_t segments = (count + segmentElements - 1) / segmentElements;
  auto offset = [&](size_t k) { return k * segmentStride; };
  auto length = [&](size_t k) { return std::min(segmentStride, bytes - k * segmentStride); };
  const bool first = rank == 0;
  const bool last = rank == p - 1;
  const int down = rank + 1;
  const int up = rank - 1;

  std::byte* scratch = nullptr;
  if (!first) {
    scratch = workspace.reserve(kChainRecvDepth * segmentStride);
    if (scratch == nullptr) {
      return Status::error(StatusCode::kOutOfMemory, "chain allreduce scratch");
    }
  }
  std::vector<TransferId>& ids = workspace.transferIds(kChainRecvDepth + 3 * segments);
  const ChainTransfers t{ids.data(), ids.data() + kChainRecvDepth,
                         ids.data() + kChainRecvDepth + segments,
                         ids.data() + kChainRecvDepth + 2 * segments};
  auto slot = [&](size_t k) { return scratch + (k % kChainRecvDepth) * segmentStride; };
  auto postAccIn = [&](size_t k) {
    return transport.postRecv(slot(k), length(k), up, &t.accIn[k % kChainRecvDepth]);
  };

  // A rank waits for the result of segment k `lag` iterations after sending acc(k) on: the time
  // the segment needs to reach rank p-1 and come back. The lag falls along the chain, so a rank
  // never waits for a transfer its downstream neighbour has not yet been able to post.
  const size_t lag = 2 * static_cast<size_t>(p - 1 - rank) + 1;
  Status status;
  for (size_t k = 0; k < kChainRecvDepth && k < segments && !first && status.isOk(); ++k) {
    status = postAccIn(k);
  }
  for (size_t step = 0; step < segments + lag && status.isOk(); ++step) {
    if (step < segments) {
      const size_t k = step;
      if (first) {
        // Rank 0's own values start the chain; the result later lands in recv.
        status = transport.postSend(own + offset(k), length(k), down, &t.accOut[k]);
      } else {
        status = waitAndClear(transport, t.accIn[k % kChainRecvDepth]);
        if (!status.isOk()) break;
        reduce(slot(k), own + offset(k), out + offset(k), length(k) / elementBytes);
        if (k + kChainRecvDepth < segments) status = postAccIn(k + kChainRecvDepth);
        if (status.isOk()) {
          status = last ? transport.postSend(out + offset(k), length(k), up, &t.resultOut[k])
                        : transport.postSend(out + offset(k), length(k), down, &t.accOut[k]);
        }
      }
      if (!status.isOk()) break;
    }
    if (last) continue;
    // acc(k) has left recv(k) (in place: it may be recv itself): the result may land there.
    if (step >= 1 && step - 1 < segments) {
      const size_t k = step - 1;
      status = waitAndClear(transport, t.accOut[k]);
      if (status.isOk()) {
        status = transport.postRecv(out + offset(k), length(k), down, &t.resultIn[k]);
      }
      if (!status.isOk()) break;
    }
    if (step >= lag && step - lag < segments) {
      const size_t k = step - lag;
      status = waitAndClear(transport, t.resultIn[k]);
      if (status.isOk() && !first) {
        status = transport.postSend(out + offset(k), length(k), up, &t.resultOut[k]);
      }
    }
  }
  for (size_t k = 0; k < segments && status.isOk(); ++k) {
    status = waitAndClear(transport, t.resultOut[k]);
  }
  if (!status.isOk()) t.cancelAll(transport, segments);
  return status;
}

}  // namespace gfshim
