// psrt's one error type. Public blocking calls throw psrt::Error; asynchronous paths hand a
// psrt::Status to their completion callback instead.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace psrt {

// Every error code, declared once: the enum below, to_string(), the Python psrt.ErrorCode and
// the bound ps::Header::error_code() checks a received ERROR against are generated from it.
// X(enumerator, Python name, to_string text, meaning). The values are on the wire (an ERROR
// carries one): a new code goes at the end, never between two.
#define PSRT_ERROR_CODES(X)                                                                     \
  X(kOk, OK, "ok", "success")                                                                   \
  X(kInvalidArgument, INVALID_ARGUMENT, "invalid argument",                                     \
    "the caller passed something unusable (bad address, size, option)")                         \
  X(kUnsupported, UNSUPPORTED, "unsupported",                                                   \
    "asked for a feature this build or backend lacks (e.g. device memory)")                     \
  X(kConnectionClosed, CONNECTION_CLOSED, "connection closed",                                  \
    "the peer closed the connection or it was closed locally")                                  \
  X(kPeerFailed, PEER_FAILED, "peer failed",                                                    \
    "the peer died or stopped answering (reset, keepalive, timeout)")                           \
  X(kTimeout, TIMEOUT, "timeout", "an operation did not finish within its time limit")          \
  X(kProtocol, PROTOCOL, "protocol error", "bytes from the network broke the wire format")      \
  X(kSystem, SYSTEM, "system error", "an OS call failed")                                       \
  X(kTransport, TRANSPORT, "transport error", "the transport library (UCX) reported a failure") \
  X(kCancelled, CANCELLED, "cancelled", "shut down before it could finish")                     \
  X(kInternal, INTERNAL, "internal error", "a bug in psrt")                                     \
  X(kAuthentication, AUTHENTICATION, "authentication failed",                                   \
    "the peer could not prove it belongs to the job (wrong secret)")                            \
  X(kNotFound, NOT_FOUND, "not found", "an unknown key, rank or file")

enum class ErrorCode : int {
#define PSRT_ERROR_CODE_ENUMERATOR(code, python_name, text, meaning) code,
  PSRT_ERROR_CODES(PSRT_ERROR_CODE_ENUMERATOR)
#undef PSRT_ERROR_CODE_ENUMERATOR
};

// The highest code: every value from kOk to it is an ErrorCode, and none above it.
inline constexpr ErrorCode kLastErrorCode = static_cast<ErrorCode>(
#define PSRT_ERROR_CODE_COUNT(code, python_name, text, meaning) +1
    -1 PSRT_ERROR_CODES(PSRT_ERROR_CODE_COUNT)
#undef PSRT_ERROR_CODE_COUNT
);

std::string_view to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// The outcome of an asynchronous operation: ok, or an error with a message a user can act on.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  explicit Status(const Error& e) : code_(e.code()), message_(e.what()) {}

  bool ok() const noexcept { return code_ == ErrorCode::kOk; }
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // Throws the error this status holds; does nothing when ok.
  void throw_if_error() const {
    if (!ok()) throw Error(code_, message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

}  // namespace psrt
