// GFSHIM_CSC_KEY=position: names each float SUM operation an engine reduces by its place in the
// training step instead of its buffer's address, so that sparse communication's residuals (and
// momentum correction's velocities) survive a framework that hands the MPI fresh gradient buffers
// every step (issue 20).
//
// A step is GFSHIM_CSC_STEP_OPERATIONS operations, or, where that is 0, learned: the shortest
// run of operation sizes (element counts) that the engine has seen three times in a row since it
// started counting. Until a step is known every operation has no place (its call runs dense,
// exactly). Once known, the sizes are checked against it; an operation whose size breaks the step
// ends it: the caller drops the residuals and counting starts again at that operation.
//
// Every rank of a communicator sees the same operations in the same order (MPI's rule for
// collectives; the engine sees every float SUM operation, whichever bucket it lands in), so every
// rank finds the same step and the same places: no agreement is needed.
//
// Sizes alone cannot tell a step of four equal-sized tensors from four steps of one: learning
// then finds the shorter step and gives the four tensors one place. GFSHIM_CSC_STEP_OPERATIONS
// says how many there are; the INFO line of the learned step lets the user check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gfshim {

class StepPositions {
 public:
  enum class Event { kNone, kLearned, kBroken, kGaveUp };

  // `stepOperations`: the step's length as the user gave it, or 0 to learn it. `maxLearned`
  // bounds the learning: a step longer than this is never found (the operations then stay dense).
  static constexpr size_t kMaxLearnedDefault = size_t{1} << 14;
  explicit StepPositions(size_t stepOperations = 0, size_t maxLearned = kMaxLearnedDefault);

  // The next operation, of `count` elements: its place in the step, or nullopt while no step is
  // known. *event says whether this operation completed the learning, broke the step, or ended
  // the learning without a step (maxLearned passed; said once).
  std::optional<size_t> next(size_t count, Event* event);

  // The operations in a step (0 while none is known).
  size_t stepLength() const { return known_ ? pattern_.size() : 0; }
  // How many operations learning looks at before it gives up (kGaveUp).
  size_t learningLimit() const { return 3 * maxLearned_; }

 private:
  size_t given_;
  size_t maxLearned_;
  bool known_ = false;
  std::vector<size_t> pattern_;  // the step's sizes once known; while learning, the sizes seen
  size_t at_ = 0;                // the next operation's place in a known step
};

// The residual key of a place in the step: disjoint from user-space addresses (their top bit is
// clear on the platforms the shim builds for), and never 0.
constexpr uintptr_t kStepPositionKeyTag = uintptr_t{1} << (sizeof(uintptr_t) * 8 - 1);
inline uintptr_t stepPositionKey(size_t position) { return kStepPositionKeyTag | position; }

}  // namespace gfshim
