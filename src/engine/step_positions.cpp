#include "engine/step_positions.h"

namespace gfshim {
namespace {

// Whether `sizes` is three repetitions of its first `period`.
bool repeatsThreeTimes(const std::vector<size_t>& sizes, size_t period) {
  for (size_t i = period; i < sizes.size(); ++i) {
    if (sizes[i] != sizes[i - period]) return false;
  }
  return true;
}

}  // namespace

StepPositions::StepPositions(size_t stepOperations, size_t maxLearned)
    : given_(stepOperations), maxLearned_(maxLearned) {}

std::optional<size_t> StepPositions::next(size_t count, Event* event) {
  *event = Event::kNone;
  if (known_) {
    if (pattern_[at_] == count) {
      const size_t place = at_;
      at_ = (at_ + 1) % pattern_.size();
      return place;
    }
    // The step broke: this operation starts counting again.
    *event = Event::kBroken;
    known_ = false;
    pattern_.clear();
    at_ = 0;
  }
  if (given_ > 0) {
    // A given step is known from its first operation; its sizes are recorded as they come.
    pattern_.push_back(count);
    const size_t place = pattern_.size() - 1;
    if (pattern_.size() == given_) known_ = true;
    return place;
  }
  if (pattern_.size() >= learningLimit()) return std::nullopt;  // gave up: stays dense
  pattern_.push_back(count);
  const size_t seen = pattern_.size();
  if (seen % 3 == 0 && repeatsThreeTimes(pattern_, seen / 3)) {
    pattern_.resize(seen / 3);
    known_ = true;
    at_ = 0;
    *event = Event::kLearned;
  } else if (seen == learningLimit()) {
    *event = Event::kGaveUp;
  }
  return std::nullopt;  // while learning (the third repetition's last one too) calls run dense
}

}  // namespace gfshim
