// Scratch memory and bookkeeping owned by one communicator's state and reused across calls, so
// algorithm steps never allocate once the largest call has been seen.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gfshim {

class Workspace {
 public:
  // Returns at least `bytes` bytes, valid until the next call; nullptr if allocation fails.
  std::byte* reserve(size_t bytes) {
    if (bytes > capacity_) {
      std::unique_ptr<std::byte[]> grown(new (std::nothrow) std::byte[bytes]);
      if (!grown) return nullptr;
      memory_ = std::move(grown);
      capacity_ = bytes;
    }
    return memory_.get();
  }

  // `count` transfer ids, all set to -1 (none posted), valid until the next call.
  std::vector<TransferId>& transferIds(size_t count) {
    transferIds_.assign(count, -1);
    return transferIds_;
  }

  // A second workspace, made on first use and kept: for a second algorithm that runs at the same
  // time as the one using this workspace (the pipelined torus's column lane).
  Workspace& second() {
    if (!second_) second_ = std::make_unique<Workspace>();
    return *second_;
  }

 private:
  std::unique_ptr<Workspace> second_;
  std::unique_ptr<std::byte[]> memory_;
  size_t capacity_ = 0;
  std::vector<TransferId> transferIds_;
};

}  // namespace gfshim
