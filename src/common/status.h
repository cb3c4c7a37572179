// Status: the error value every internal function returns. No exception crosses the C ABI, and
// none is used for control flow inside: a failure travels up as a Status to the hook, which either
// passes the call through (before any byte was sent) or reports it through the communicator's
// error handler.
#pragma once

#include <string>
#include <utility>

namespace gfshim {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // a value the caller (user, config file) supplied is unusable
  kUnsupported,      // valid, but this build or path cannot do it
  kTransportError,   // a point-to-point operation failed; mpiError() holds the MPI error code
  kOutOfMemory,
  kTimeout,  // only the fake transport of the tests times out
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(StatusCode code, std::string message, int mpiError = 0) {
    Status s;
    s.code_ = code;
    s.message_ = std::move(message);
    s.mpiError_ = mpiError;
    return s;
  }

  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The MPI error code behind a kTransportError (0 otherwise).
  int mpiError() const { return mpiError_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int mpiError_ = 0;
};

}  // namespace gfshim

// Propagates a non-ok Status to the caller: the short trail NCCL's checks.h leaves.
#define GFSHIM_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::gfshim::Status gfshim_status_ = (expr); \
    if (!gfshim_status_.isOk()) {             \
      return gfshim_status_;                  \
    }                                         \
  } while (0)
