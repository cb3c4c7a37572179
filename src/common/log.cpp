#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace gfshim {
namespace detail {
std::atomic<uint8_t> gLogLevel{static_cast<uint8_t>(LogLevel::kWarn)};
std::atomic<uint32_t> gLogSubsysMask{~0u};
}  // namespace detail

namespace {

std::atomic<int> gRank{-1};

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kNone:
      break;
  }
  return "";
}

const char* subsysName(LogSubsys subsys) {
  switch (subsys) {
    case LogSubsys::kInit:
      return "INIT";
    case LogSubsys::kConfig:
      return "CONFIG";
    case LogSubsys::kPolicy:
      return "POLICY";
    case LogSubsys::kEngine:
      return "ENGINE";
    case LogSubsys::kAlgo:
      return "ALGO";
    case LogSubsys::kTransport:
      return "TRANSPORT";
    case LogSubsys::kStats:
      return "STATS";
  }
  return "?";
}

}  // namespace

void setLogFilter(LogFilter filter) {
  detail::gLogLevel.store(static_cast<uint8_t>(filter.level), std::memory_order_relaxed);
  detail::gLogSubsysMask.store(filter.subsysMask, std::memory_order_relaxed);
}

void setLogRank(int rank) { gRank.store(rank, std::memory_order_relaxed); }

void logLine(LogLevel level, LogSubsys subsys, const char* format, ...) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  char line[2048];
  const int rank = gRank.load(std::memory_order_relaxed);
  int used =
      rank >= 0
          ? std::snprintf(line, sizeof(line), "%s:%d [%d] GFSHIM %s %s: ", host,
                          static_cast<int>(getpid()), rank, levelName(level), subsysName(subsys))
          : std::snprintf(line, sizeof(line), "%s:%d [?] GFSHIM %s %s: ", host,
                          static_cast<int>(getpid()), levelName(level), subsysName(subsys));
  va_list args;
  va_start(args, format);
  const int body = std::vsnprintf(line + used, sizeof(line) - used - 1, format, args);
  va_end(args);
  used += body > 0 ? body : 0;
  if (used > static_cast<int>(sizeof(line)) - 2) used = static_cast<int>(sizeof(line)) - 2;
  line[used++] = '\n';
  // One write per line, so lines of different ranks and threads never interleave mid-line.
  ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(used));
  (void)ignored;
}

}  // namespace gfshim
