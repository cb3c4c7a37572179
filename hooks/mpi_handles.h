// Translation of MPI handles into the engine's plain types. Only predefined datatypes and ops
// map; everything else (derived datatypes, user-defined ops, MPI_CHAR, Fortran types) has no
// engine equivalent and the call passes through.
#pragma once

#include <mpi.h>

#include <optional>
#include <type_traits>

#include "common/types.h"
#include "hooks/hook_api.h"

namespace gfshim::hooks {

std::optional<DType> engineDType(MPI_Datatype type);
std::optional<RedOp> engineOp(MPI_Op op);

// A RawHandle (hook_api.h) as the handle type of the MPI this shim was built for.
template <typename Handle>
Handle fromRaw(RawHandle raw) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<Handle>(raw);
  } else {
    return static_cast<Handle>(static_cast<uint32_t>(raw));
  }
}

}  // namespace gfshim::hooks
