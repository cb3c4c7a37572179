#include "common/trace_phase.h"

#include "common/static_tls.h"

namespace gfshim {
namespace {
thread_local PhaseTracer* tTracer GFSHIM_STATIC_TLS = nullptr;
}  // namespace

void setThreadPhaseTracer(PhaseTracer* tracer) { tTracer = tracer; }

PhaseTracer* threadPhaseTracer() { return tTracer; }

}  // namespace gfshim
