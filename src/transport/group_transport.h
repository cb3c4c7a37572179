// A view of a subgroup of a Transport's ranks as a Transport of its own: rank i of the group is
// rank members[i] of the parent. The 2D torus runs its row and column rings on such views of the
// one private communicator. Row peers and column peers of a rank are disjoint sets, so messages
// of different phases never meet on the same pair of ranks out of order.
#pragma once

#include <utility>
#include <vector>

#include "transport/transport.h"

namespace gfshim {

class GroupTransport : public Transport {
 public:
  GroupTransport(Transport& parent, std::vector<int> members, int myIndex)
      : parent_(parent), members_(std::move(members)), myIndex_(myIndex) {}
  int rank() const override { return myIndex_; }
  int size() const override { return static_cast<int>(members_.size()); }
  Status postSend(const void* data, size_t bytes, int peer, TransferId* id) override {
    return parent_.postSend(data, bytes, members_[static_cast<size_t>(peer)], id);
  }
  Status postRecv(void* data, size_t bytes, int peer, TransferId* id) override {
    return parent_.postRecv(data, bytes, members_[static_cast<size_t>(peer)], id);
  }
  Status wait(TransferId id) override { return parent_.wait(id); }
  void cancel(TransferId id) override { parent_.cancel(id); }

 private:
  Transport& parent_;
  std::vector<int> members_;
  int myIndex_;
};

}  // namespace gfshim
