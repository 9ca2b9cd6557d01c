#include "transport/byte_streams.h"

#include <algorithm>
#include <array>
#include <cstdlib>

namespace psrt::transport {
namespace {

// UCX transports (and aliases) that never leave the host.
constexpr std::array<std::string_view, 14> kHostLocal = {
    "self", "sm",    "shm",       "posix",    "sysv",      "mm",       "cma",
    "knem", "xpmem", "cuda_copy", "cuda_ipc", "rocm_copy", "rocm_ipc", "cuda"};

bool host_local(std::string_view tl) {
  return std::find(kHostLocal.begin(), kHostLocal.end(), tl) != kHostLocal.end();
}

}  // namespace

bool moves_as_byte_streams(std::string_view transport, std::string_view ucx_tls) {
  if (transport == "tcp") return true;
  if (transport != "ucx" || ucx_tls.empty() || ucx_tls.front() == '^') return false;
  bool tcp = false;
  while (!ucx_tls.empty()) {
    const auto comma = ucx_tls.find(',');
    const std::string_view tl = ucx_tls.substr(0, comma);
    ucx_tls.remove_prefix(comma == std::string_view::npos ? ucx_tls.size() : comma + 1);
    if (tl == "tcp")
      tcp = true;
    else if (!tl.empty() && !host_local(tl))
      return false;  // rc, ud, dc, ib, all, an alias this list does not know: maybe RDMA
  }
  return tcp;
}

bool moves_as_byte_streams(std::string_view transport) {
  const char* tls = std::getenv("UCX_TLS");
  return moves_as_byte_streams(transport, tls == nullptr ? "" : tls);
}

}  // namespace psrt::transport
