// The next definition of an MPI_* function: where every call the shim passes through goes, so a
// PMPI tool preloaded after libgfshim.so (LD_PRELOAD=libgfshim.so:libtool.so) still sees the
// application's calls that the shim does not handle itself. Without such a tool the next
// definition is the MPI library's own MPI_* (an alias of its PMPI_*).
//
// What goes where:
//   application call the shim passes through (small allreduce, MPI_Init*, MPI_Finalize,
//   communicator creation, Wait/Test, the foreign-flavour path)  -> next MPI_*  (NextMpi)
//   the shim's own traffic (engine, agreement, statistics, nested calls) -> PMPI_* (never seen)
//
// Cost: resolved with dlsym(RTLD_NEXT, ...) on first use, not at load time (a Python program
// dlopens libmpi after the shim's constructors ran); afterwards one relaxed load and an indirect
// call, the same as the PLT call to PMPI_* it replaces. No lock: two threads resolving at once
// store the same pointer. Where dlsym finds nothing, the PMPI_* function is used.
//
// This header does not include mpi.h: exports.cpp instantiates it with raw handle types.
#pragma once

#include <atomic>
#include <utility>

namespace gfshim::hooks {

namespace detail {
// dlsym(RTLD_NEXT, name) from inside libgfshim.so; nullptr when no later object defines it.
void* findNextDefinition(const char* name) noexcept;
}  // namespace detail

template <typename Fn>
class NextMpi {
 public:
  constexpr NextMpi(const char* name, Fn fallback) noexcept : name_(name), fallback_(fallback) {}
  NextMpi(const NextMpi&) = delete;
  NextMpi& operator=(const NextMpi&) = delete;

  template <typename... Args>
  int operator()(Args&&... args) const noexcept {
    Fn fn = fn_.load(std::memory_order_relaxed);
    if (__builtin_expect(fn == nullptr, 0)) fn = resolve();
    return fn(std::forward<Args>(args)...);
  }

 private:
  __attribute__((noinline, cold)) Fn resolve() const noexcept {
    void* found = detail::findNextDefinition(name_);
    Fn fn = found != nullptr ? reinterpret_cast<Fn>(found) : fallback_;
    fn_.store(fn, std::memory_order_relaxed);
    return fn;
  }

  const char* name_;
  Fn fallback_;
  mutable std::atomic<Fn> fn_{nullptr};
};

}  // namespace gfshim::hooks

// Defines `next<Name>`, the next definition of MPI_<Name>, falling back to PMPI_<Name> (which
// must be declared). Constant-initialized (constexpr constructor), so usable before any dynamic
// initializer has run.
#define GFSHIM_NEXT_MPI(Name)                                                          \
  static ::gfshim::hooks::NextMpi<decltype(&PMPI_##Name)> next##Name{"MPI_" #Name, \
                                                                      &PMPI_##Name}
