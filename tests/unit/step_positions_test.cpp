// StepPositions (engine/step_positions.h): the places of operations in a training step, learned
// from their sizes or given, checked against every later step.
#include "engine/step_positions.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace gfshim {
namespace {

using Event = StepPositions::Event;

// Feeds `sizes` and returns each operation's place (-1: none) and the events, in order.
struct Fed {
  std::vector<long> places;
  std::vector<Event> events;
};
Fed feed(StepPositions& steps, const std::vector<size_t>& sizes) {
  Fed fed;
  for (size_t count : sizes) {
    Event event = Event::kNone;
    const std::optional<size_t> place = steps.next(count, &event);
    fed.places.push_back(place ? static_cast<long>(*place) : -1);
    fed.events.push_back(event);
  }
  return fed;
}

std::vector<size_t> repeat(const std::vector<size_t>& step, int times) {
  std::vector<size_t> all;
  for (int t = 0; t < times; ++t) all.insert(all.end(), step.begin(), step.end());
  return all;
}

TEST(StepPositions, LearnsTheStepAfterThreeRepetitionsAndNamesEveryPlaceThen) {
  StepPositions steps;
  const std::vector<size_t> step = {1000, 10, 500, 10, 2000};
  const Fed learning = feed(steps, repeat(step, 3));
  for (long place : learning.places) EXPECT_EQ(place, -1);  // dense while learning
  for (size_t i = 0; i + 1 < learning.events.size(); ++i) EXPECT_EQ(learning.events[i], Event::kNone);
  EXPECT_EQ(learning.events.back(), Event::kLearned);
  EXPECT_EQ(steps.stepLength(), step.size());
  const Fed after = feed(steps, repeat(step, 2));
  EXPECT_EQ(after.places, (std::vector<long>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  for (Event event : after.events) EXPECT_EQ(event, Event::kNone);
}

TEST(StepPositions, ARepeatedStartIsNotAStepUntilItRepeatsThreeTimesWhole) {
  // Two equal layers and a head: [w, b, w, b, head]. The first six sizes are not yet periodic
  // with period 2 (the head comes at 5), so the step found is the whole five.
  StepPositions steps;
  const std::vector<size_t> step = {64, 8, 64, 8, 100};
  feed(steps, repeat(step, 3));
  EXPECT_EQ(steps.stepLength(), 5u);
}

TEST(StepPositions, ABrokenStepDropsThePlacesAndIsLearnedAgain) {
  StepPositions steps;
  feed(steps, repeat({30, 40}, 3));
  ASSERT_EQ(steps.stepLength(), 2u);
  const Fed broken = feed(steps, {30, 41});
  EXPECT_EQ(broken.places, (std::vector<long>{0, -1}));
  EXPECT_EQ(broken.events, (std::vector<Event>{Event::kNone, Event::kBroken}));
  EXPECT_EQ(steps.stepLength(), 0u);
  // Counting starts at the operation that broke it: [41, 7] three times.
  const Fed relearned = feed(steps, {7, 41, 7, 41, 7});
  EXPECT_EQ(relearned.events.back(), Event::kLearned);
  EXPECT_EQ(steps.stepLength(), 2u);
  EXPECT_EQ(feed(steps, {41, 7}).places, (std::vector<long>{0, 1}));
}

TEST(StepPositions, EqualSizedOperationsLookLikeShortStepsUnlessTheStepIsGiven) {
  // Four equal tensors a step: sizes alone say a step of one (the documented ambiguity).
  StepPositions learned;
  feed(learned, repeat({256, 256, 256, 256}, 1));
  EXPECT_EQ(learned.stepLength(), 1u);
  // Given as four, each tensor keeps its own place from the first operation on.
  StepPositions given(4);
  const Fed fed = feed(given, repeat({256, 256, 256, 256}, 3));
  EXPECT_EQ(fed.places, (std::vector<long>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(given.stepLength(), 4u);
}

TEST(StepPositions, AGivenStepIsCheckedAndRecountedFromTheOperationThatBreaksIt) {
  StepPositions given(3);
  feed(given, {5, 6, 7});
  // 9 breaks [5, 6, 7]; the step is then counted again from it: [9, 1, 2].
  const Fed fed = feed(given, {5, 9, 1, 2, 9});
  EXPECT_EQ(fed.places, (std::vector<long>{0, 0, 1, 2, 0}));
  EXPECT_EQ(fed.events, (std::vector<Event>{Event::kNone, Event::kBroken, Event::kNone,
                                            Event::kNone, Event::kNone}));
  EXPECT_EQ(given.stepLength(), 3u);
}

TEST(StepPositions, LearningGivesUpPastItsBoundAndStaysDense) {
  StepPositions steps(0, 2);  // steps of at most 2 operations
  const Fed fed = feed(steps, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  for (long place : fed.places) EXPECT_EQ(place, -1);
  EXPECT_EQ(steps.stepLength(), 0u);
  for (size_t i = 0; i < fed.events.size(); ++i) {
    EXPECT_EQ(fed.events[i], i == 5 ? Event::kGaveUp : Event::kNone) << i;  // said once
  }
}

TEST(StepPositions, KeysOfPlacesAreNeverZeroNorUserAddresses) {
  EXPECT_NE(stepPositionKey(0), 0u);
  EXPECT_NE(stepPositionKey(0), stepPositionKey(1));
  int onTheStack = 0;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(&onTheStack) & kStepPositionKeyTag, 0u);
}

}  // namespace
}  // namespace gfshim
