// In-process transport for threads-as-ranks tests (as Gloo's test harness): one FakeFabric shared
// by N threads, one FakeTransport per thread.
//
// Semantics are rendezvous, the strictest MPI allows: nothing is copied when a send or receive
// is posted; the data move from the sender's buffer into the receiver's at the first wait, by
// either side, after both are posted (MPI's progress rule), and a send completes only then. So
// an algorithm that reuses a send buffer too early, or that needs the transport to buffer
// messages, is caught (wrong data or a timeout) instead of passing by luck. Every wait gives up
// after a timeout and returns kTimeout, so a deadlock fails a test rather than hanging it. Inside
// a task (common/task.h) a wait tests and yields instead of sleeping, as the PMPI transport's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace gfshim {

class FakeFabric {
 public:
  explicit FakeFabric(int ranks, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  int ranks() const { return ranks_; }

  // Bytes that crossed the fabric, for traffic assertions: sent by `rank` in all, and from one
  // rank to another.
  uint64_t bytesSent(int rank) const;
  uint64_t bytesSent(int from, int to) const;

 private:
  friend class FakeTransport;
  struct PostedSend {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  struct PostedRecv {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // Messages from one rank to another, matched in posting order by sequence number. A sequence
  // number leaves both maps and enters `done` when its data moved.
  struct Channel {
    uint64_t sendsPosted = 0;
    uint64_t recvsPosted = 0;
    std::map<uint64_t, PostedSend> sends;
    std::map<uint64_t, PostedRecv> recvs;
    std::map<uint64_t, bool> done;  // sequence -> sizes matched
  };
  // Moves the data of message `sequence` if both sides are posted; true once it has moved.
  bool tryComplete(Channel& channel, uint64_t sequence);

  Channel& channel(int from, int to) { return channels_[static_cast<size_t>(from * ranks_ + to)]; }

  int ranks_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Channel> channels_;
  std::vector<uint64_t> bytesSent_;     // per sender
  std::vector<uint64_t> bytesBetween_;  // per (sender, receiver)
};

class FakeTransport : public Transport {
 public:
  FakeTransport(FakeFabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return fabric_.ranks(); }
  Status postSend(const void* data, size_t bytes, int peer, TransferId* id) override;
  Status postRecv(void* data, size_t bytes, int peer, TransferId* id) override;
  Status wait(TransferId id) override;
  void cancel(TransferId id) override;

 private:
  struct Pending {
    bool inUse = false;
    bool isSend = false;
    int peer = 0;
    uint64_t sequence = 0;
  };
  TransferId allocate();

  FakeFabric& fabric_;
  int rank_;
  std::deque<Pending> pending_;  // stays put while another task posts (as PmpiTransport's)
  std::vector<TransferId> free_;
};

}  // namespace gfshim
