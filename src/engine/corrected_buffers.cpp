#include "engine/corrected_buffers.h"

namespace gfshim {

CorrectedBuffers& CorrectedBuffers::process() {
  static CorrectedBuffers buffers;
  return buffers;
}

bool CorrectedBuffers::claim(uintptr_t address, size_t count, const void* owner) {
  const std::lock_guard<std::mutex> lock(mutex_);
  bool shared = false;
  bool recorded = false;
  const auto [first, last] = claims_.equal_range(address);
  for (auto it = first; it != last; ++it) {
    if (it->second.owner == owner) {
      it->second.count = count;
      recorded = true;
    } else if (it->second.count == count) {
      shared = true;
    }
  }
  if (!recorded) claims_.emplace(address, Claim{count, owner});
  return shared;
}

bool CorrectedBuffers::corrected(uintptr_t address, size_t count) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto [first, last] = claims_.equal_range(address);
  for (auto it = first; it != last; ++it) {
    if (it->second.count == count) return true;
  }
  return false;
}

void CorrectedBuffers::release(const void* owner) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = claims_.begin(); it != claims_.end();) {
    it = it->second.owner == owner ? claims_.erase(it) : std::next(it);
  }
}

}  // namespace gfshim
