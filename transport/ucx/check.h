// UCX status at the boundary: the first place that sees a failure turns it into psrt::Error
// naming the call.
#pragma once

#include <ucs/type/status.h>

#include <string>

#include "psrt/error.h"

namespace psrt::transport::ucx {

inline Error ucs_error(const char* what, ucs_status_t status) {
  return Error(ErrorCode::kTransport, std::string(what) + ": " + ucs_status_string(status));
}

// Maps a failed UCX operation status onto the error code a user acts on.
inline ErrorCode ucs_error_code(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_CANCELED:
      return ErrorCode::kConnectionClosed;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
      return ErrorCode::kPeerFailed;
    case UCS_ERR_UNSUPPORTED:
      return ErrorCode::kUnsupported;
    default:
      return ErrorCode::kTransport;
  }
}

}  // namespace psrt::transport::ucx

#define PSRT_UCS_CHECK(call)                                                          \
  do {                                                                                \
    ucs_status_t psrt_st_ = (call);                                                   \
    if (psrt_st_ != UCS_OK) throw ::psrt::transport::ucx::ucs_error(#call, psrt_st_); \
  } while (0)
