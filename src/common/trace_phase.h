// Inner phases of an algorithm for a tracer (GFSHIM_TIMELINE), without passing a tracer through
// every algorithm: a thread that wants them installs a PhaseTracer (setThreadPhaseTracer), and
// algorithms mark their phases with TracePhase, which costs one thread-local load when no tracer
// is installed (as NVTX ranges do). Phase names are string literals.
#pragma once

namespace gfshim {

class PhaseTracer {
 public:
  virtual ~PhaseTracer() = default;
  virtual void begin(const char* phase) = 0;
  virtual void end(const char* phase) = 0;
  // A tracer for work that runs at the same time as this one's, interleaved on the same thread (the
  // second lane of tasks of algo/torus_allreduce.h), so that each lane's phases nest in their own
  // row; nullptr: that work is not traced.
  virtual PhaseTracer* secondLane() { return nullptr; }
};

// The calling thread's tracer; nullptr removes it.
void setThreadPhaseTracer(PhaseTracer* tracer);
PhaseTracer* threadPhaseTracer();

// One phase on the calling thread's tracer, if any, from construction to end() or destruction.
class TracePhase {
 public:
  explicit TracePhase(const char* phase) : tracer_(threadPhaseTracer()), phase_(phase) {
    if (tracer_ != nullptr) tracer_->begin(phase_);
  }
  ~TracePhase() { end(); }
  void end() {
    if (tracer_ != nullptr) tracer_->end(phase_);
    tracer_ = nullptr;
  }
  TracePhase(const TracePhase&) = delete;
  TracePhase& operator=(const TracePhase&) = delete;

 private:
  PhaseTracer* tracer_;
  const char* phase_;
};

}  // namespace gfshim
