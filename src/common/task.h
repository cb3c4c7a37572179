// A resumable task: a function that runs on a stack of its own and gives way (Task::yield) where it
// would otherwise block, to be resumed later by whoever drives progress.
//
// Why a stack of its own (a stackful coroutine) rather than rewriting every algorithm as a state
// machine (UCC's init/post/progress tasks): the ring, torus, chain, compressed-ring and CSC
// executors, the fusion rounds and the agreements stay written once, as straight-line code, and
// become resumable at their waits: a wait inside a task tests its transfer and yields until it
// completes (src/mpi/pmpi_wait.h). So the same code serves a blocking call (run directly, its
// waits block) and a queued operation progressed from the application's own MPI calls
// (mpi/fusion_queue.h, GFSHIM_PROGRESS=calls). One switch costs a swapcontext (~0.1-0.3 us),
// paid only while a transfer is still in flight.
//
//   driver (any thread, one at a time)        task body (its own stack)
//   resume() ------------------------------>  runs ... wait: test -> not done -> yield()
//            <------------------------------  (returns to the driver: resume() == false)
//   resume() ------------------------------>  test -> done -> goes on ... returns
//            <------------------------------  resume() == true: finished
//
// Rules: resume() is not reentrant (a task never resumes itself; the caller must serialise
// resumes of one task); a task resumed on another thread than before sees that thread's
// thread-locals, so code that runs in a task reads them afresh at each use and keeps no
// thread-local's address across a yield (the shim's are initial-exec, read with one
// %fs-relative load, or read through functions that are not inlined). The stack is mmap'ed with a
// guard page below it, and only the pages touched cost memory. Sanitizers are told about every
// switch (AddressSanitizer's and ThreadSanitizer's fiber annotations), so tasks run under both.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace gfshim {

class Task {
 public:
  static constexpr size_t kDefaultStackBytes = size_t{1} << 20;

  explicit Task(std::function<void()> body, size_t stackBytes = kDefaultStackBytes);
  ~Task();  // the body must have finished, or never started
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // Runs the body until it yields or returns; true once it has returned. Not from inside this
  // task. After the body returned, resume() returns true at once.
  bool resume();
  bool finished() const;

  // Inside a task body: gives way to the code that resumed it, returning when resumed again.
  // Outside any task: does nothing and returns false.
  static bool yield();
  // Whether the calling code runs inside a task body (on this thread).
  static bool inTask();

  struct Context;  // the stack and the two saved register sets (task.cpp)

 private:
  std::unique_ptr<Context> context_;
};

}  // namespace gfshim
