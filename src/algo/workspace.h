// Scratch memory owned by one communicator's state and reused across calls, so algorithm steps
// never allocate. Contents are uninitialized.
#pragma once

#include <cstddef>
#include <memory>

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

 private:
  std::unique_ptr<std::byte[]> memory_;
  size_t capacity_ = 0;
};

}  // namespace gfshim
