#include "common/trace_phase.h"

namespace gfshim {
namespace {
thread_local PhaseTracer* tTracer __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace

void setThreadPhaseTracer(PhaseTracer* tracer) { tTracer = tracer; }

PhaseTracer* threadPhaseTracer() { return tTracer; }

}  // namespace gfshim
