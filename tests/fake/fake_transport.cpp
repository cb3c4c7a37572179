#include "fake/fake_transport.h"

#include <cstring>
#include <string>
#include <thread>

#include "common/task.h"

namespace gfshim {

FakeFabric::FakeFabric(int ranks, std::chrono::milliseconds timeout)
    : ranks_(ranks),
      timeout_(timeout),
      channels_(static_cast<size_t>(ranks * ranks)),
      bytesSent_(static_cast<size_t>(ranks), 0),
      bytesBetween_(static_cast<size_t>(ranks * ranks), 0) {}

uint64_t FakeFabric::bytesSent(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytesSent_[static_cast<size_t>(rank)];
}

uint64_t FakeFabric::bytesSent(int from, int to) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytesBetween_[static_cast<size_t>(from * ranks_ + to)];
}

bool FakeFabric::tryComplete(Channel& channel, uint64_t sequence) {
  if (channel.done.count(sequence) != 0) return true;
  auto send = channel.sends.find(sequence);
  auto recv = channel.recvs.find(sequence);
  if (send == channel.sends.end() || recv == channel.recvs.end()) return false;
  const bool sizesMatch = send->second.bytes == recv->second.bytes;
  if (sizesMatch && send->second.bytes > 0) {
    std::memcpy(recv->second.data, send->second.data, send->second.bytes);
  }
  channel.done[sequence] = sizesMatch;
  channel.sends.erase(send);
  channel.recvs.erase(recv);
  changed_.notify_all();
  return true;
}

TransferId FakeTransport::allocate() {
  if (free_.empty()) {
    pending_.emplace_back();
    return static_cast<TransferId>(pending_.size() - 1);
  }
  const TransferId id = free_.back();
  free_.pop_back();
  return id;
}

Status FakeTransport::postSend(const void* data, size_t bytes, int peer, TransferId* id) {
  if (peer < 0 || peer >= fabric_.ranks()) {
    return Status::error(StatusCode::kInvalidArgument, "fake send to invalid peer");
  }
  countPosted(bytes);
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(fabric_.mutex_);
    FakeFabric::Channel& channel = fabric_.channel(rank_, peer);
    sequence = channel.sendsPosted++;
    channel.sends[sequence] = {data, bytes};
    fabric_.bytesSent_[static_cast<size_t>(rank_)] += bytes;
    fabric_.bytesBetween_[static_cast<size_t>(rank_ * fabric_.ranks_ + peer)] += bytes;
  }
  fabric_.changed_.notify_all();
  *id = allocate();
  pending_[static_cast<size_t>(*id)] = Pending{true, true, peer, sequence};
  return Status::ok();
}

Status FakeTransport::postRecv(void* data, size_t bytes, int peer, TransferId* id) {
  if (peer < 0 || peer >= fabric_.ranks()) {
    return Status::error(StatusCode::kInvalidArgument, "fake recv from invalid peer");
  }
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(fabric_.mutex_);
    FakeFabric::Channel& channel = fabric_.channel(peer, rank_);
    sequence = channel.recvsPosted++;
    channel.recvs[sequence] = {data, bytes};
  }
  fabric_.changed_.notify_all();
  *id = allocate();
  pending_[static_cast<size_t>(*id)] = Pending{true, false, peer, sequence};
  return Status::ok();
}

void FakeTransport::cancel(TransferId id) {
  Pending& slot = pending_[static_cast<size_t>(id)];
  {
    std::lock_guard<std::mutex> lock(fabric_.mutex_);
    FakeFabric::Channel& channel =
        slot.isSend ? fabric_.channel(rank_, slot.peer) : fabric_.channel(slot.peer, rank_);
    (slot.isSend ? channel.sends.erase(slot.sequence) : channel.recvs.erase(slot.sequence));
  }
  slot.inUse = false;
  free_.push_back(id);
}

Status FakeTransport::wait(TransferId id) {
  if (id < 0 || static_cast<size_t>(id) >= pending_.size() ||
      !pending_[static_cast<size_t>(id)].inUse) {
    return Status::error(StatusCode::kInvalidArgument, "fake wait on unknown transfer");
  }
  Pending& slot = pending_[static_cast<size_t>(id)];
  FakeFabric::Channel& channel =
      slot.isSend ? fabric_.channel(rank_, slot.peer) : fabric_.channel(slot.peer, rank_);
  const auto deadline = std::chrono::steady_clock::now() + fabric_.timeout_;
  Status status;
  {
    std::unique_lock<std::mutex> lock(fabric_.mutex_);
    bool completed = false;
    if (Task::inTask()) {
      // As the PMPI transport's waits (src/mpi/pmpi_wait.h): test, and yield until done.
      while (!(completed = fabric_.tryComplete(channel, slot.sequence)) &&
             std::chrono::steady_clock::now() < deadline) {
        lock.unlock();
        // The peers are threads of this process: give them the core (many spinning rank threads
        // on few cores would otherwise each wait out a time slice per message).
        std::this_thread::yield();
        Task::yield();
        lock.lock();
      }
    } else {
      completed = fabric_.changed_.wait_until(
          lock, deadline, [&] { return fabric_.tryComplete(channel, slot.sequence); });
    }
    if (!completed) {
      status = Status::error(StatusCode::kTimeout,
                             std::string("fake ") + (slot.isSend ? "send to" : "recv from") +
                                 " rank " + std::to_string(slot.peer) + " never matched");
    } else if (!channel.done[slot.sequence]) {
      status = Status::error(StatusCode::kInternal,
                             "fake message sizes differ between send and receive");
    }
  }
  slot.inUse = false;
  free_.push_back(id);
  return status;
}

}  // namespace gfshim
