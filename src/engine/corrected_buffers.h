// The buffers whose momentum velocity the shim keeps (GFSHIM_CSC_MOMENTUM, address keys), across
// every engine of the process (one per communicator and path: blocking calls, MPI_Iallreduces).
//
// Momentum correction hands back momentum SGD's update only when one velocity sees every
// reduction of a gradient. Two cases break that where the shim can see them (issue 20):
//   - two engines each keep a velocity for the same buffer (the buffer is reduced blocking and
//     nonblocking on one communicator, or on two communicators): each velocity sees part of it;
//   - the MPI reduces a buffer that an engine corrects (a call the shim passes through): that
//     reduction bypasses the velocity.
// The shim warns in both (engine/lossy_allreduce.cpp, hooks/allreduce_hook.cpp). A buffer is its
// start address and element count, as the residual store keys it (compress/csc.h); the shim does
// not see a free, so a buffer freed and reallocated at the same address and size counts as the
// same one.
//
// Thread-safe: the fusion queue's thread and the application's thread both claim. Claims happen
// when an engine makes a velocity; lookups only on calls that pass through under momentum
// correction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace gfshim {

class CorrectedBuffers {
 public:
  // The process's.
  static CorrectedBuffers& process();

  // `owner` keeps a velocity for `count` floats at `address` (replacing what it kept there).
  // Returns true when another owner keeps one for the same buffer.
  bool claim(uintptr_t address, size_t count, const void* owner);
  // Whether some owner keeps a velocity for `count` floats at `address`.
  bool corrected(uintptr_t address, size_t count) const;
  // Forgets `owner`'s buffers (its engine is gone, or it dropped its residuals).
  void release(const void* owner);

 private:
  struct Claim {
    size_t count;
    const void* owner;
  };
  mutable std::mutex mutex_;
  std::multimap<uintptr_t, Claim> claims_;
};

}  // namespace gfshim
