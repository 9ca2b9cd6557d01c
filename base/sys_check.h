// Boundary checks for OS calls: the first place that sees a failure turns it into a psrt::Error
// that names the call and errno.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "psrt/error.h"

namespace psrt {

inline std::string errno_string(int err) {
  return std::string(std::strerror(err));
}

[[noreturn]] inline void throw_system_error(const char* what, int err) {
  throw Error(ErrorCode::kSystem, std::string(what) + ": " + errno_string(err));
}

}  // namespace psrt

// Retries on EINTR; throws psrt::Error(kSystem) naming the call when it returns -1.
#define PSRT_SYS_CHECK(call)                                        \
  ([&]() {                                                          \
    for (;;) {                                                      \
      auto psrt_rc_ = (call);                                       \
      if (psrt_rc_ != -1) return psrt_rc_;                          \
      if (errno != EINTR) ::psrt::throw_system_error(#call, errno); \
    }                                                               \
  }())
