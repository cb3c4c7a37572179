#include "transport/stall_report.h"

#include <cstdio>

namespace gfshim {

std::string formatStallReport(const StallReport& report) {
  char text[512];
  const OperationLabel& label = report.label;
  std::string what = label.what != nullptr ? label.what : "engine operation";
  if (label.count > 0) {
    std::snprintf(text, sizeof text, " of %lld x %s %s", static_cast<long long>(label.count),
                  dtypeName(label.dtype), redOpName(label.op));
    what += text;
  }
  std::snprintf(text, sizeof text,
                "stall: waited %.1f s in engine operation #%llu on a communicator of %d ranks (%s)",
                report.waitedSeconds, static_cast<unsigned long long>(report.operation),
                report.size, what.c_str());
  std::string line = text;
  if (report.peer >= 0) line += ", for rank " + std::to_string(report.peer);
  if (report.answers.empty()) {
    return line + "; the ranks that have not joined are unknown (the peers can be asked only "
                  "under MPI_THREAD_MULTIPLE)";
  }
  std::string missing, waiting;
  for (size_t r = 0; r < report.answers.size(); ++r) {
    if (static_cast<int>(r) == report.rank) continue;
    const StallAnswer& answer = report.answers[r];
    std::string& list = !answer.answered || answer.operations < report.operation ? missing : waiting;
    if (!list.empty()) list += ", ";
    list += "rank " + std::to_string(r);
    if (!answer.answered) {
      list += " (no answer)";
    } else if (answer.operations < report.operation) {
      std::snprintf(text, sizeof text, " (at operation #%llu, %s)",
                    static_cast<unsigned long long>(answer.operations),
                    answer.waitingSeconds >= 0 ? "waiting in it" : "not in the engine");
      list += text;
    } else if (answer.waitingSeconds >= 0) {
      std::snprintf(text, sizeof text, " (%.1f s)", answer.waitingSeconds);
      list += text;
    }
  }
  line += "; not joined: " + (missing.empty() ? std::string("none") : missing);
  if (!waiting.empty()) line += "; joined: " + waiting;
  return line;
}

}  // namespace gfshim
