// The boundary between the exported MPI_* symbols (exports.cpp, compiled without mpi.h) and the
// shim's hook logic (compiled with the mpi.h of the flavour it was built for).
//
// Handles cross this boundary as raw 64-bit register values (RawHandle). That is what lets a shim
// preloaded into a program of the other MPI flavour pass every call through intact: Open MPI
// handles are pointers, MPICH handles 32-bit ints, and a function declared with the wrong one
// would truncate or misread them before it could forward them.
#pragma once

#include <atomic>
#include <cstdint>

namespace gfshim::hooks {

using RawHandle = uintptr_t;

enum class AllreduceVariant { kBlocking, kNonblocking, kBlockingBigCount, kNonblockingBigCount };

struct RawAllreduceArgs {
  const void* send;
  void* recv;
  int64_t count;
  RawHandle dtype;
  RawHandle op;
  RawHandle comm;
  void* request;  // MPI_Request* for the nonblocking variants
  AllreduceVariant variant;
};

namespace detail {
enum FlavourCheck : int { kUnchecked = 0, kBuiltForThisMpi = 1, kForeignMpi = 2 };
extern std::atomic<int> gFlavourCheck;
bool checkFlavourOnce() noexcept;
}  // namespace detail

// True when the running MPI library is not the flavour this shim was built for; every call is
// then forwarded untouched. Decided once, on first use; afterwards one relaxed load.
inline bool foreignMpi() noexcept {
  const int check = detail::gFlavourCheck.load(std::memory_order_relaxed);
  return check == detail::kUnchecked ? detail::checkFlavourOnce() : check == detail::kForeignMpi;
}

// The hooks of calls without handles; with a foreign MPI they forward the call untouched (the init
// hooks check, the others find the shim inactive and nothing fused in flight).
int initHook(int* argc, char*** argv) noexcept;
int initThreadHook(int* argc, char*** argv, int required, int* provided) noexcept;
int finalizeHook() noexcept;
int queryThreadHook(int* provided) noexcept;
int allreduceHook(const RawAllreduceArgs& args) noexcept;
// After the application made a communicator (`comm` is its MPI_Comm*): returns `rc`.
int commCreatedHook(int rc, void* comm) noexcept;
// Requests and statuses travel as untyped pointers (MPI_Request*, MPI_Status*).
int waitHook(void* request, void* status) noexcept;
int waitallHook(int count, void* requests, void* statuses) noexcept;
int waitanyHook(int count, void* requests, int* index, void* status) noexcept;
int waitsomeHook(int count, void* requests, int* outcount, int* indices, void* statuses) noexcept;
int testHook(void* request, int* flag, void* status) noexcept;
int testallHook(int count, void* requests, int* flag, void* statuses) noexcept;
int testanyHook(int count, void* requests, int* index, int* flag, void* status) noexcept;
int testsomeHook(int count, void* requests, int* outcount, int* indices, void* statuses) noexcept;

}  // namespace gfshim::hooks
