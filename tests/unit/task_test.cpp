// Resumable tasks (common/task.h): where a task's body runs, how it yields and is resumed, and
// what a driver sees.
#include "common/task.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace gfshim {
namespace {

TEST(Task, BodyWithoutYieldFinishesInOneResume) {
  int runs = 0;
  Task task([&] { ++runs; });
  EXPECT_FALSE(task.finished());
  EXPECT_TRUE(task.resume());
  EXPECT_TRUE(task.finished());
  EXPECT_TRUE(task.resume());  // nothing more to run
  EXPECT_EQ(runs, 1);
}

TEST(Task, EachYieldReturnsToTheDriverAndResumeContinuesAfterIt) {
  std::vector<int> trace;
  Task task([&] {
    for (int step = 0; step < 3; ++step) {
      trace.push_back(step);
      EXPECT_TRUE(Task::yield());
    }
    trace.push_back(99);
  });
  for (int resume = 0; resume < 3; ++resume) {
    EXPECT_FALSE(task.resume());
    trace.push_back(-resume);
  }
  EXPECT_TRUE(task.resume());
  EXPECT_EQ(trace, (std::vector<int>{0, 0, 1, -1, 2, -2, 99}));
}

TEST(Task, InTaskOnlyInsideTheBodyAndYieldOutsideDoesNothing) {
  EXPECT_FALSE(Task::inTask());
  EXPECT_FALSE(Task::yield());
  bool inside = false;
  Task task([&] { inside = Task::inTask(); });
  task.resume();
  EXPECT_TRUE(inside);
  EXPECT_FALSE(Task::inTask());
}

TEST(Task, LocalsOfTheBodySurviveYields) {
  long sum = 0;
  Task task([&] {
    long local[64];
    for (int i = 0; i < 64; ++i) {
      local[i] = i;
      Task::yield();
    }
    for (long v : local) sum += v;
  });
  while (!task.resume()) {
  }
  EXPECT_EQ(sum, 64 * 63 / 2);
}

TEST(Task, ExceptionOfTheBodyReachesTheDriver) {
  Task task([] {
    Task::yield();
    throw std::runtime_error("from the task");
  });
  EXPECT_FALSE(task.resume());
  EXPECT_THROW(task.resume(), std::runtime_error);
  EXPECT_TRUE(task.finished());
}

TEST(Task, ATaskMayDriveAnotherAndEachYieldsToItsOwnDriver) {
  std::vector<int> trace;
  Task inner([&] {
    trace.push_back(1);
    Task::yield();
    trace.push_back(3);
  });
  Task outer([&] {
    inner.resume();
    trace.push_back(2);
    Task::yield();
    EXPECT_TRUE(Task::inTask());
    inner.resume();
    trace.push_back(4);
  });
  EXPECT_FALSE(outer.resume());
  EXPECT_TRUE(outer.resume());
  EXPECT_TRUE(inner.finished());
  EXPECT_EQ(trace, (std::vector<int>{1, 2, 3, 4}));
}

TEST(Task, ResumedByAnotherThreadGoesOnWhereItYielded) {
  int steps = 0;
  Task task([&] {
    ++steps;
    Task::yield();
    ++steps;
  });
  EXPECT_FALSE(task.resume());
  bool finished = false;
  std::thread other([&] { finished = task.resume(); });
  other.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(steps, 2);
}

// Deep enough to need most of the default stack: it is the task's own, not the driver's.
int depth(int n) {
  volatile char frame[512];
  frame[0] = static_cast<char>(n);
  if (n == 0) return frame[0];
  return depth(n - 1) + 1 + frame[0] * 0;
}

TEST(Task, TheBodyHasAStackOfItsOwn) {
  int reached = 0;
  Task task([&] { reached = depth(1000); });
  EXPECT_TRUE(task.resume());
  EXPECT_EQ(reached, 1000);
}

TEST(Task, ManyTasksAtOnce) {
  std::vector<std::unique_ptr<Task>> tasks;
  std::vector<int> counts(200, 0);
  for (size_t i = 0; i < counts.size(); ++i) {
    tasks.push_back(std::make_unique<Task>([&counts, i] {
      for (size_t k = 0; k < i % 7; ++k) {
        ++counts[i];
        Task::yield();
      }
    }));
  }
  bool all = false;
  while (!all) {
    all = true;
    for (auto& task : tasks) all = task->resume() && all;
  }
  for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], static_cast<int>(i % 7));
}

}  // namespace
}  // namespace gfshim
