#include "compress/half_wire_steps.h"

namespace gfshim {

Status runHalfWireSteps(const HalfWireCall& call, const float* in, float* out, size_t count,
                        HalfWireBackend& backend, bool* redone) {
  if (!call.halfWire) return backend.exactSum(in, out, count);
  if (count == 0) return Status::ok();
  const float* source = in;
  if (in == out) GFSHIM_RETURN_IF_ERROR(backend.keepInput(in, count, &source));
  const float ranks = static_cast<float>(call.ranks);
  const float encodeScale = call.prescale ? 1.0f / ranks : 1.0f;
  const float decodeScale = call.prescale ? ranks : 1.0f;
  GFSHIM_RETURN_IF_ERROR(
      backend.compressedSum(call.format, encodeScale, decodeScale, source, out, count));
  bool nonFinite = false;
  GFSHIM_RETURN_IF_ERROR(backend.anyNonFinite(out, count, &nonFinite));
  if (!nonFinite) return Status::ok();
  *redone = true;
  return backend.exactSum(source, out, count);
}

}  // namespace gfshim
