#include "common/task.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <new>
#include <utility>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GFSHIM_TASK_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define GFSHIM_TASK_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GFSHIM_TASK_ASAN)
#define GFSHIM_TASK_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(GFSHIM_TASK_TSAN)
#define GFSHIM_TASK_TSAN 1
#endif

#ifdef GFSHIM_TASK_ASAN
extern "C" void __sanitizer_start_switch_fiber(void** fakeStackSave, const void* bottom,
                                               size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fakeStackSave, const void** bottomOld,
                                                size_t* sizeOld);
#endif
#ifdef GFSHIM_TASK_TSAN
extern "C" void* __tsan_get_current_fiber();
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif

namespace gfshim {

struct Task::Context {
  std::function<void()> body;
  ucontext_t task{};
  ucontext_t caller{};
  void* stack = nullptr;  // the mapping, guard page first
  size_t mappedBytes = 0;
  bool started = false;
  bool finished = false;
  std::exception_ptr failure;
  // The sanitizers' view of the two stacks.
  const void* callerStackBottom = nullptr;
  size_t callerStackBytes = 0;
  void* callerFakeStack = nullptr;
  void* taskFakeStack = nullptr;
  void* callerFiber = nullptr;
  void* taskFiber = nullptr;
};

namespace {

// The task whose body runs on this thread (nullptr: none). Read through a function that is
// never inlined, so that code resumed on another thread reads that thread's value.
thread_local Task::Context* tCurrent = nullptr;

__attribute__((noinline)) Task::Context* currentTask() {
  Task::Context* volatile current = tCurrent;
  return current;
}

__attribute__((noinline)) void setCurrentTask(Task::Context* context) { tCurrent = context; }

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Switches from the driver into the task and back.
void switchIntoTask(Task::Context& c) {
#ifdef GFSHIM_TASK_TSAN
  c.callerFiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(c.taskFiber, 0);
#endif
#ifdef GFSHIM_TASK_ASAN
  __sanitizer_start_switch_fiber(&c.callerFakeStack, static_cast<char*>(c.stack) + pageBytes(),
                                 c.mappedBytes - pageBytes());
#endif
  swapcontext(&c.caller, &c.task);
#ifdef GFSHIM_TASK_ASAN
  __sanitizer_finish_switch_fiber(c.callerFakeStack, nullptr, nullptr);
#endif
}

// Switches from the task back to its driver; `final`: the body has returned.
void switchToDriver(Task::Context& c, bool final) {
#ifdef GFSHIM_TASK_TSAN
  __tsan_switch_to_fiber(c.callerFiber, 0);
#endif
#ifdef GFSHIM_TASK_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &c.taskFakeStack, c.callerStackBottom,
                                 c.callerStackBytes);
#else
  (void) final;
#endif
  swapcontext(&c.task, &c.caller);
#ifdef GFSHIM_TASK_ASAN
  __sanitizer_finish_switch_fiber(c.taskFakeStack, &c.callerStackBottom, &c.callerStackBytes);
#endif
}

void runBody(unsigned high, unsigned low);

// getcontext returns twice: kept out of resume() so that none of its locals can be clobbered.
__attribute__((noinline)) void prepareContext(Task::Context& c) {
  getcontext(&c.task);
  c.task.uc_stack.ss_sp = static_cast<char*>(c.stack) + pageBytes();
  c.task.uc_stack.ss_size = c.mappedBytes - pageBytes();
  c.task.uc_link = nullptr;
  const auto address = reinterpret_cast<uintptr_t>(&c);
  makecontext(&c.task, reinterpret_cast<void (*)()>(&runBody), 2,
              static_cast<unsigned>(address >> 32), static_cast<unsigned>(address));
}

void runBody(unsigned high, unsigned low) {
  auto* c = reinterpret_cast<Task::Context*>((static_cast<uintptr_t>(high) << 32) |
                                             static_cast<uintptr_t>(low));
#ifdef GFSHIM_TASK_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &c->callerStackBottom, &c->callerStackBytes);
#endif
  try {
    c->body();
  } catch (...) {
    c->failure = std::current_exception();
  }
  c->finished = true;
  switchToDriver(*c, true);
}

}  // namespace

Task::Task(std::function<void()> body, size_t stackBytes) : context_(new Context()) {
  Context& c = *context_;
  c.body = std::move(body);
  const size_t page = pageBytes();
  c.mappedBytes = (stackBytes + page - 1) / page * page + page;
  c.stack =
      mmap(nullptr, c.mappedBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (c.stack == MAP_FAILED) throw std::bad_alloc();
  mprotect(c.stack, page, PROT_NONE);  // the guard: an overflow faults instead of corrupting
#ifdef GFSHIM_TASK_TSAN
  c.taskFiber = __tsan_create_fiber(0);
#endif
}

Task::~Task() {
  Context& c = *context_;
#ifdef GFSHIM_TASK_TSAN
  if (c.taskFiber != nullptr) __tsan_destroy_fiber(c.taskFiber);
#endif
  if (c.stack != nullptr && c.stack != MAP_FAILED) munmap(c.stack, c.mappedBytes);
}

bool Task::resume() {
  Context& c = *context_;
  if (c.finished) return true;
  if (!c.started) {
    c.started = true;
    prepareContext(c);
  }
  Context* const outer = currentTask();
  setCurrentTask(&c);
  switchIntoTask(c);
  setCurrentTask(outer);
  if (c.finished && c.failure) {
    std::exception_ptr failure = std::move(c.failure);
    c.failure = nullptr;
    std::rethrow_exception(failure);
  }
  return c.finished;
}

bool Task::finished() const { return context_->finished; }

bool Task::yield() {
  Context* const c = currentTask();
  if (c == nullptr) return false;
  switchToDriver(*c, false);
  return true;
}

bool Task::inTask() { return currentTask() != nullptr; }

}  // namespace gfshim
