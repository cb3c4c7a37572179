// The rules of a CSC residual store (compress/csc.h), whatever memory holds the values. The host's
// CscResidualStore and the NCCL plugin's device store (cuda/nccl_plugin.cpp) keep their entries
// here and only allocate, zero and free:
//
//   one entry per key; a key that comes back with another element count drops its old entry
//   (the buffer was reallocated or reshaped: its residual belongs to no one)
//   a new entry that would take the bytes held past the cap is refused: that buffer runs dense
//
// Entry: movable, frees its values when destroyed, with a `size_t count` (elements, each taking
// the book's bytesPerElement). Not thread-safe: one book per communicator or NCCL group, or a lock in the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace gfshim {

template <typename Key, typename Entry>
class CscResidualBook {
 public:
  explicit CscResidualBook(uint64_t capBytes, size_t bytesPerElement = sizeof(float))
      : capBytes_(capBytes), bytesPerElement_(bytesPerElement) {}

  // The key's entry when it holds `count` elements. Otherwise nullptr, with the key's entry of
  // another count dropped and *fits = whether a new entry of `count` elements stays within the
  // cap.
  Entry* find(const Key& key, size_t count, bool* fits) {
    auto found = entries_.find(key);
    if (found != entries_.end()) {
      if (found->second.count == count) return &found->second;
      bytesHeld_ -= found->second.count * bytesPerElement_;
      entries_.erase(found);
    }
    *fits = count <= (capBytes_ - bytesHeld_) / bytesPerElement_;
    return nullptr;
  }
  // Keeps `entry` (its values made, its count set) at `key`, which find left free.
  Entry* add(const Key& key, Entry entry) {
    bytesHeld_ += entry.count * bytesPerElement_;
    return &entries_.insert_or_assign(key, std::move(entry)).first->second;
  }
  // Drops the entries whose keys lie in [first, last].
  void dropRange(const Key& first, const Key& last) {
    const auto begin = entries_.lower_bound(first);
    const auto end = entries_.upper_bound(last);
    for (auto entry = begin; entry != end; ++entry)
      bytesHeld_ -= entry->second.count * bytesPerElement_;
    entries_.erase(begin, end);
  }
  void clear() {
    entries_.clear();
    bytesHeld_ = 0;
  }

  uint64_t bytesHeld() const { return bytesHeld_; }
  size_t entryCount() const { return entries_.size(); }
  uint64_t capBytes() const { return capBytes_; }

 private:
  uint64_t capBytes_;
  size_t bytesPerElement_;
  uint64_t bytesHeld_ = 0;
  std::map<Key, Entry> entries_;  // node-based: entries stay put; ordered: dropRange
};

}  // namespace gfshim
