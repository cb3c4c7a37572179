// Logging filtered by level and subsystem before any formatting happens (as NCCL's debug.h).
// Lines look like `host:pid [rank] GFSHIM LEVEL SUBSYS: message` and go to stderr in one write.
#pragma once

#include <atomic>
#include <cstdint>

namespace gfshim {

enum class LogLevel : uint8_t { kNone, kWarn, kInfo, kTrace };  // GFSHIM_DEBUG (config.h)

enum class LogSubsys : uint32_t {  // named for GFSHIM_DEBUG_SUBSYS in config.h
  kInit = 1u << 0,
  kConfig = 1u << 1,
  kPolicy = 1u << 2,
  kEngine = 1u << 3,
  kAlgo = 1u << 4,
  kTransport = 1u << 5,
  kStats = 1u << 6,
};

struct LogFilter {
  LogLevel level = LogLevel::kWarn;
  uint32_t subsysMask = ~0u;
};

void setLogFilter(LogFilter filter);
// The rank shown in the prefix; -1 (before MPI_Init) shows `[?]`.
void setLogRank(int rank);
namespace detail {
extern std::atomic<uint8_t> gLogLevel;
extern std::atomic<uint32_t> gLogSubsysMask;
}  // namespace detail

// Inline: checked before any formatting, also on the pass-through path.
inline bool logEnabled(LogLevel level, LogSubsys subsys) {
  return static_cast<uint8_t>(level) <= detail::gLogLevel.load(std::memory_order_relaxed) &&
         (static_cast<uint32_t>(subsys) & detail::gLogSubsysMask.load(std::memory_order_relaxed)) !=
             0;
}
void logLine(LogLevel level, LogSubsys subsys, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace gfshim

#define GFSHIM_LOG(level, subsys, ...)                                                        \
  do {                                                                                        \
    if (::gfshim::logEnabled(::gfshim::LogLevel::level, ::gfshim::LogSubsys::subsys)) {       \
      ::gfshim::logLine(::gfshim::LogLevel::level, ::gfshim::LogSubsys::subsys, __VA_ARGS__); \
    }                                                                                         \
  } while (0)

#define GFSHIM_WARN(subsys, ...) GFSHIM_LOG(kWarn, subsys, __VA_ARGS__)
#define GFSHIM_INFO(subsys, ...) GFSHIM_LOG(kInfo, subsys, __VA_ARGS__)
#define GFSHIM_TRACE(subsys, ...) GFSHIM_LOG(kTrace, subsys, __VA_ARGS__)
