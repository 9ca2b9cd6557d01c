#include "psrt/error.h"

namespace psrt {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kConnectionClosed:
      return "connection closed";
    case ErrorCode::kPeerFailed:
      return "peer failed";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kProtocol:
      return "protocol error";
    case ErrorCode::kSystem:
      return "system error";
    case ErrorCode::kTransport:
      return "transport error";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kAuthentication:
      return "authentication failed";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

}  // namespace psrt
