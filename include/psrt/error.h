// psrt's one error type. Public blocking calls throw psrt::Error; asynchronous paths hand a
// psrt::Status to their completion callback instead.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace psrt {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,   // the caller passed something unusable (bad address, size, option)
  kUnsupported,       // asked for a feature this build or backend lacks (e.g. device memory)
  kConnectionClosed,  // the peer closed the connection or it was closed locally
  kPeerFailed,        // the peer died or stopped answering (reset, keepalive, timeout)
  kTimeout,           // an operation did not finish within its time limit
  kProtocol,          // bytes from the network broke the wire format
  kSystem,            // an OS call failed
  kTransport,         // the transport library (UCX) reported a failure
  kCancelled,         // shut down before it could finish
  kInternal,
  kAuthentication,  // the peer could not prove it belongs to the job (wrong secret)
  kNotFound,        // an unknown key, rank or file
};

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
