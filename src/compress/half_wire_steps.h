// The dense float SUM of a lossy call: exact, or fp16/bf16 on the wire with the overflow redo
// (DESIGN.md, "Compression"). Written once for both places it runs: the host engine
// (engine/lossy_allreduce.cpp: host memory, the compressed ring or torus over the shim's
// transport) and the NCCL plugin (cuda/nccl_plugin.cpp: the codec kernels and NCCL on the
// group's stream). runHalfWireSteps decides; a HalfWireBackend supplies the primitives and owns
// the scratch. Includes nothing of MPI, CUDA or the configuration.
//
//   exact     no 16-bit wire: exactSum(in -> out), nothing else
//   keep      in place: keepInput copies in, so the redo still has it once out is written
//   sum       compressedSum: encode(in * 1/p or 1) -> 16-bit SUM over ranks -> decode * (p or 1)
//   check     anyNonFinite(out): the result is identical on every rank, so is the answer
//   redo      Inf or NaN in out: exactSum(kept input -> out) on every rank alike. The rule does
//             not ask whether the inputs already held Inf/NaN: then the exact result is
//             non-finite too, and nothing is lost by the redo.
//
// Preconditions: every rank calls with the same (call, count); in == out (in place) or disjoint.
// Cost on top of the sum: an in-place call copies its input once; the check reads the result once
// (on a device: one host wait for its flag).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "compress/half_codec.h"

namespace gfshim {

struct HalfWireCall {
  bool halfWire = false;  // false: the exact float sum
  HalfFormat format = HalfFormat::kFp16;
  bool prescale = false;  // divide by `ranks` before encoding, multiply back after decoding
  int ranks = 1;          // of the sum
};

// The primitives, each collective where it sums; all ranks call them in the same order.
class HalfWireBackend {
 public:
  virtual ~HalfWireBackend() = default;
  // out = the exact float SUM over ranks of in (in == out allowed).
  virtual Status exactSum(const float* in, float* out, size_t count) = 0;
  // *kept = a copy of in (count > 0 floats) in the backend's scratch, unchanged by writes to in.
  virtual Status keepInput(const float* in, size_t count, const float** kept) = 0;
  // out = decode(16-bit SUM over ranks of encode(in * encodeScale))) * decodeScale, in != out;
  // a scale of 1.0f adds no rounding.
  virtual Status compressedSum(HalfFormat format, float encodeScale, float decodeScale,
                               const float* in, float* out, size_t count) = 0;
  // *found = whether any of values[0, count) is Inf or NaN.
  virtual Status anyNonFinite(const float* values, size_t count, bool* found) = 0;
};

// out = SUM over ranks of in (count floats) as `call` says (see the top of this file); *redone
// is set when the 16-bit result held Inf/NaN and the call was redone exactly (left alone
// otherwise).
Status runHalfWireSteps(const HalfWireCall& call, const float* in, float* out, size_t count,
                        HalfWireBackend& backend, bool* redone);

}  // namespace gfshim
