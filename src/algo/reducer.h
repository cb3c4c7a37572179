// CPU reduction kernels for every (datatype, op) pair MPI allows in an allreduce.
//
// out[i] = a[i] OP b[i]. `out` may alias `b` exactly (the in-place case) but must not partially
// overlap either input. Loops are written so GCC vectorizes the common cases (float/double/int
// SUM, MAX, MIN) without -ffast-math: each element is one independent operation, so results do
// not depend on the vector width.
//
// Paths: "avx2" (the same loops built for AVX2, chosen at run time with __builtin_cpu_supports)
// and "portable" (what the build targets, SSE2 on x86-64). AVX2 pays only where the operands are
// in cache: a float SUM of 64K floats ran 1-25 % faster on the development VM, and from 1M floats
// both run at memory speed (bench/RESULTS.md, codec_bench). The two give identical bits
// (reducer_test checks every pair).
#pragma once

#include <cstddef>

#include "common/types.h"

namespace gfshim {

using ReduceFn = void (*)(const void* a, const void* b, void* out, size_t count);

// Which kernels run. kAuto is the best this CPU supports; kAvx2 falls back to kPortable on a CPU
// without AVX2. The explicit paths exist for tests and benchmarks.
enum class ReducePath { kAuto, kPortable, kAvx2 };

// nullptr when MPI does not allow `op` on `type` (see opAllowedOn).
ReduceFn cpuReduceFn(DType type, RedOp op, ReducePath path = ReducePath::kAuto);
// The path kAuto takes on this CPU: "avx2" or "portable".
const char* reduceImplementation();

}  // namespace gfshim
