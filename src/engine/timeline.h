// GFSHIM_TIMELINE: a Chrome / Perfetto trace of the lazy allreduce, like Horovod's timeline. Each
// rank writes PATH.<world rank>.json ({"traceEvents": [...]}, pid = world rank, tid = thread,
// timestamps in microseconds of the system clock, so the files of one machine line up; under SMPI
// of the simulated clock; merge them by concatenating their event arrays). Events: each
// operation's stay in its queue as an async span ("b"/"e", id = operation), and on the
// communicator's progress thread the phases setup, negotiate, pack, reduce (named after the
// algorithm: ring, torus2d, native, with the lossy mode if any), unpack and complete as nested
// begin/end events ("B"/"E"); inside reduce, the algorithm's own phases (ring reduce-scatter /
// allgather; torus row reduce-scatter, column allreduce, row allgather). With progress in calls
// the queues' round loops are tasks that interleave on the application's thread, so each queue's
// phases carry a lane of their own as their tid (TimelineLane, numbered from kFirstTaskLane) and
// nest within it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "common/trace_phase.h"

namespace gfshim {

class Timeline {
 public:
  // Opens PATH.<rank>.json; nullptr, with a warning, when it cannot be written.
  static std::unique_ptr<Timeline> open(const std::string& path, int rank);
  ~Timeline();  // ends the JSON document
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A phase on the calling thread; `args` is a JSON object's members ("\"bytes\": 4"), or empty.
  void begin(const std::string& name, const std::string& args = "");
  void end(const std::string& name);
  // An operation's time in the queue.
  void queued(uint64_t id, int64_t bytes);
  void dequeued(uint64_t id);

 private:
  Timeline(FILE* file, int rank) : file_(file), rank_(rank) {}
  void event(const char* phase, const std::string& name, const std::string& extra);

  std::mutex mutex_;
  FILE* file_;
  int rank_;
  bool first_ = true;
};

// While one lives, the calling thread's events carry `lane` as their tid instead of the thread's.
class TimelineLane {
 public:
  static constexpr long kFirstTaskLane = 1000000;
  // A lane no one else uses, from kFirstTaskLane on.
  static long fresh();
  explicit TimelineLane(long lane);
  ~TimelineLane();
  TimelineLane(const TimelineLane&) = delete;
  TimelineLane& operator=(const TimelineLane&) = delete;

 private:
  long outer_;
};

// The algorithms' inner phases (common/trace_phase.h) as timeline phases of the calling thread.
class TimelinePhaseTracer : public PhaseTracer {
 public:
  explicit TimelinePhaseTracer(Timeline& timeline) : timeline_(timeline) {}
  void begin(const char* phase) override { timeline_.begin(phase); }
  void end(const char* phase) override { timeline_.end(phase); }
  // The same timeline on a lane of its own (made on first use).
  PhaseTracer* secondLane() override;

 private:
  Timeline& timeline_;
  std::unique_ptr<PhaseTracer> secondLane_;
};

// Begin and end of a phase on a timeline that may be absent (nullptr: nothing is recorded).
class TimelinePhase {
 public:
  TimelinePhase(Timeline* timeline, std::string name, const std::string& args = "")
      : timeline_(timeline), name_(std::move(name)) {
    if (timeline_) timeline_->begin(name_, args);
  }
  ~TimelinePhase() {
    if (timeline_) timeline_->end(name_);
  }
  TimelinePhase(const TimelinePhase&) = delete;
  TimelinePhase& operator=(const TimelinePhase&) = delete;

 private:
  Timeline* timeline_;
  std::string name_;
};

}  // namespace gfshim
