// CPU reduction kernels for every (datatype, op) pair MPI allows in an allreduce.
//
// out[i] = a[i] OP b[i]. `out` may alias `b` exactly (the in-place case) but must not partially
// overlap either input. Loops are written so GCC vectorizes the common cases (float/double/int
// SUM, MAX, MIN) without -ffast-math: each element is one independent operation, so results do
// not depend on the vector width.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace gfshim {

using ReduceFn = void (*)(const void* a, const void* b, void* out, size_t count);

// nullptr when MPI does not allow `op` on `type` (see opAllowedOn).
ReduceFn cpuReduceFn(DType type, RedOp op);

}  // namespace gfshim
