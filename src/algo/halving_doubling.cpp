#include "algo/halving_doubling.h"

#include <array>
#include <cstring>

namespace gfshim {
namespace {

struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t count() const { return end - begin; }
};

// One step with `peer`: sends `sendBytes` from `out` and receives `recvBytes` into `in`, the
// receive posted first; an empty side posts nothing. After an error nothing stays posted.
Status exchange(Transport& transport, int peer, const std::byte* out, size_t sendBytes,
                std::byte* in, size_t recvBytes) {
  TransferId recvId = -1;
  TransferId sendId = -1;
  if (recvBytes > 0) GFSHIM_RETURN_IF_ERROR(transport.postRecv(in, recvBytes, peer, &recvId));
  if (sendBytes > 0) {
    const Status posted = transport.postSend(out, sendBytes, peer, &sendId);
    if (!posted.isOk()) {
      if (recvId != -1) transport.cancel(recvId);
      return posted;
    }
  }
  if (recvId != -1) {
    const Status received = transport.wait(recvId);
    if (!received.isOk()) {
      if (sendId != -1) transport.cancel(sendId);
      return received;
    }
  }
  return sendId != -1 ? transport.wait(sendId) : Status::ok();
}

}  // namespace

Status runHalvingDoublingAllreduce(size_t count, size_t elementBytes, ReduceFn reduce,
                                   Transport& transport, Workspace& workspace, const void* send,
                                   void* recv) {
  const int p = transport.size();
  const int rank = transport.rank();
  const size_t bytes = count * elementBytes;
  auto* data = static_cast<std::byte*>(recv);
  if (send != recv && bytes > 0) std::memcpy(data, send, bytes);
  if (p == 1 || count == 0) return Status::ok();
  if (reduce == nullptr) {
    return Status::error(StatusCode::kUnsupported, "no reduction kernel for this datatype/op");
  }
  int participants = 1;  // p', the largest power of two not above p
  while (participants <= p / 2) participants *= 2;
  const int folded = p - participants;  // pairs that fold into one participant
  const size_t scratchBytes = folded > 0 ? bytes : (count - count / 2) * elementBytes;
  std::byte* scratch = workspace.reserve(scratchBytes);
  if (scratch == nullptr) {
    return Status::error(StatusCode::kOutOfMemory, "cannot allocate halving-doubling scratch");
  }
  auto at = [data, elementBytes](size_t element) { return data + element * elementBytes; };

  // Fold: the even rank of a pair hands its buffer over and waits for the result.
  int index = rank - folded;  // this rank's place among the participants
  if (rank < 2 * folded) {
    if (rank % 2 == 0) {
      GFSHIM_RETURN_IF_ERROR(exchange(transport, rank + 1, data, bytes, nullptr, 0));
      return exchange(transport, rank + 1, nullptr, 0, data, bytes);
    }
    GFSHIM_RETURN_IF_ERROR(exchange(transport, rank - 1, nullptr, 0, scratch, bytes));
    reduce(scratch, data, data, count);
    index = rank / 2;
  }
  auto rankOf = [folded](int participant) {
    return participant < folded ? 2 * participant + 1 : participant + folded;
  };

  // Halving, the partner's distance doubling: the largest halves go to the nearest partners
  // (neighbouring nodes, under one switch), the smallest to the farthest. ranges[level] is the
  // range held before the step at distance 2^level.
  std::array<Range, 32> ranges{};
  Range held{0, count};
  int level = 0;
  for (int distance = 1; distance < participants; distance *= 2, ++level) {
    ranges[static_cast<size_t>(level)] = held;
    const size_t middle = held.begin + held.count() / 2;
    const bool keepLower = (index & distance) == 0;
    const Range kept = keepLower ? Range{held.begin, middle} : Range{middle, held.end};
    const Range given = keepLower ? Range{middle, held.end} : Range{held.begin, middle};
    GFSHIM_RETURN_IF_ERROR(exchange(transport, rankOf(index ^ distance), at(given.begin),
                                    given.count() * elementBytes, scratch,
                                    kept.count() * elementBytes));
    if (kept.count() > 0) reduce(scratch, at(kept.begin), at(kept.begin), kept.count());
    held = kept;
  }

  // Doubling: the steps of the halving in reverse, each partner sending the range it reduced.
  for (int distance = participants / 2; distance >= 1; distance /= 2) {
    const Range parent = ranges[static_cast<size_t>(--level)];
    const bool heldLower = (index & distance) == 0;
    const Range other = heldLower ? Range{held.end, parent.end} : Range{parent.begin, held.begin};
    GFSHIM_RETURN_IF_ERROR(exchange(transport, rankOf(index ^ distance), at(held.begin),
                                    held.count() * elementBytes, at(other.begin),
                                    other.count() * elementBytes));
    held = parent;
  }

  // Unfold: the odd rank of a pair sends the result to the even one.
  if (rank < 2 * folded) return exchange(transport, rank - 1, data, bytes, nullptr, 0);
  return Status::ok();
}

}  // namespace gfshim
