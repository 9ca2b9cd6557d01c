#include "runtime/preflight/host_probe.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/interfaces.h"
#include "device/cuda_device.h"

namespace psrt::preflight {
namespace {

std::optional<std::uint64_t> limit_of(rlim_t v) {
  if (v == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

// One attempt on one address: "" on success, else the reason.
std::string connect_one(const addrinfo& ai, std::chrono::milliseconds timeout) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  std::string why;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else {
      pollfd p{fd, POLLOUT, 0};
      int n;
      do {
        n = ::poll(&p, 1, static_cast<int>(timeout.count()));
      } while (n < 0 && errno == EINTR);
      if (n == 0) {
        why = fmt::format("no answer within {} ms", timeout.count());
      } else {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) why = std::strerror(err);
      }
    }
  }
  ::close(fd);
  return why;
}

}  // namespace

MemlockFacts probe_memlock() {
  rlimit r{};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0) return {};
  return {limit_of(r.rlim_cur), limit_of(r.rlim_max)};
}

CudaFacts probe_cuda() {
  CudaFacts out;
  const int n = device::cuda_device_count(&out.why);
  for (int i = 0; i < n; ++i) {
    try {
      out.devices.push_back(device::cuda_device_name(i));
    } catch (const std::exception& e) {
      out.devices.push_back(fmt::format("? ({})", e.what()));
    }
  }
  out.driver_version = device::cuda_driver_version();
  return out;
}

std::string tcp_reach(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const std::string where = join_host_port(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    return fmt::format("resolve {}: {}", host, ::gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    why = connect_one(*ai, timeout);
    if (why.empty()) break;
  }
  ::freeaddrinfo(res);
  return why.empty() ? why : fmt::format("connect {}: {}", where, why);
}

Listener::Listener(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &res); rc != 0) {
    error_ = fmt::format("resolve {}: {}", address, ::gai_strerror(rc));
    return;
  }
  fd_ = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  const int one = 1;
  if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd_, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd_, 64) != 0) {
    error_ = fmt::format("cannot listen there: {}", std::strerror(errno));
  } else {
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    char text[NI_MAXSERV] = {};
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, nullptr, 0, text, sizeof(text),
                      NI_NUMERICSERV) == 0)
      port_ = std::atoi(text);
    else
      error_ = "cannot read the bound port";
  }
  ::freeaddrinfo(res);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace psrt::preflight
