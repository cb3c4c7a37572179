#include "engine/timeline.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "common/log.h"

#if defined(GFSHIM_SMPI)
#include <simgrid/engine.h>
#endif

namespace gfshim {
namespace {

// Under SMPI the simulated clock, which every simulated rank shares: the system clock would
// show how long SimGrid took to compute the run, not the run.
double nowMicros() {
#if defined(GFSHIM_SMPI)
  return simgrid_get_clock() * 1e6;
#else
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
#endif
}

thread_local long tLane = 0;  // 0: the thread's own id

long threadId() { return tLane != 0 ? tLane : static_cast<long>(syscall(SYS_gettid)); }

}  // namespace

long TimelineLane::fresh() {
  static std::atomic<long> lanes{kFirstTaskLane};
  return lanes.fetch_add(1, std::memory_order_relaxed);
}

TimelineLane::TimelineLane(long lane) : outer_(tLane) { tLane = lane; }

namespace {

// Phases on a fixed lane of a timeline.
class LanePhaseTracer : public PhaseTracer {
 public:
  LanePhaseTracer(Timeline& timeline, long lane) : timeline_(timeline), lane_(lane) {}
  void begin(const char* phase) override {
    const TimelineLane lane(lane_);
    timeline_.begin(phase);
  }
  void end(const char* phase) override {
    const TimelineLane lane(lane_);
    timeline_.end(phase);
  }

 private:
  Timeline& timeline_;
  long lane_;
};

}  // namespace

PhaseTracer* TimelinePhaseTracer::secondLane() {
  if (!secondLane_) {
    secondLane_ = std::make_unique<LanePhaseTracer>(timeline_, TimelineLane::fresh());
  }
  return secondLane_.get();
}

TimelineLane::~TimelineLane() { tLane = outer_; }

std::unique_ptr<Timeline> Timeline::open(const std::string& path, int rank) {
  const std::string name = path + "." + std::to_string(rank) + ".json";
  FILE* file = std::fopen(name.c_str(), "w");
  if (file == nullptr) {
    GFSHIM_WARN(kConfig, "GFSHIM_TIMELINE: cannot write '%s'; no timeline", name.c_str());
    return nullptr;
  }
  std::fputs("{\"traceEvents\": [\n", file);
  return std::unique_ptr<Timeline>(new Timeline(file, rank));
}

Timeline::~Timeline() {
  std::fputs("\n]}\n", file_);
  std::fclose(file_);
}

void Timeline::event(const char* phase, const std::string& name, const std::string& extra) {
  char head[160];
  std::snprintf(head, sizeof head, "{\"ph\": \"%s\", \"pid\": %d, \"tid\": %ld, \"ts\": %.3f, ",
                phase, rank_, threadId(), nowMicros());
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs(first_ ? "" : ",\n", file_);
  first_ = false;
  std::fputs(head, file_);
  std::fprintf(file_, "\"name\": \"%s\"%s}", name.c_str(), extra.c_str());
}

void Timeline::begin(const std::string& name, const std::string& args) {
  event("B", name, args.empty() ? "" : ", \"args\": {" + args + "}");
}

void Timeline::end(const std::string& name) { event("E", name, ""); }

void Timeline::queued(uint64_t id, int64_t bytes) {
  event("b", "queue",
        ", \"cat\": \"fusion\", \"id\": " + std::to_string(id) +
            ", \"args\": {\"bytes\": " + std::to_string(bytes) + "}");
}

void Timeline::dequeued(uint64_t id) {
  event("e", "queue", ", \"cat\": \"fusion\", \"id\": " + std::to_string(id));
}

}  // namespace gfshim
