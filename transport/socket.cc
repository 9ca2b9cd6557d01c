#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "base/sys_check.h"
#include "psrt/error.h"

namespace psrt::transport {
namespace {

// An IPv4 or IPv6 socket address of `hp` (names resolve, IPv4 first); an empty host (or "*",
// "0.0.0.0") is every IPv4 interface, "::" every IPv6 one.
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&ss); }
};

SockAddr resolve(const HostPort& hp) {
  SockAddr out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.ss);
  const auto port = htons(static_cast<std::uint16_t>(hp.port));
  if (hp.host.empty() || hp.host == "0.0.0.0" || hp.host == "*") {
    v4->sin_family = AF_INET, v4->sin_port = port, v4->sin_addr.s_addr = htonl(INADDR_ANY);
    out.len = sizeof(sockaddr_in);
    return out;
  }
  if (::inet_pton(AF_INET, hp.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET, v4->sin_port = port, out.len = sizeof(sockaddr_in);
    return out;
  }
  if (::inet_pton(AF_INET6, hp.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6, v6->sin6_port = port, out.len = sizeof(sockaddr_in6);
    return out;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(hp.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot resolve host '" + hp.host + "': " + ::gai_strerror(rc));
  }
  const addrinfo* pick = res;
  for (const addrinfo* r = res; r != nullptr; r = r->ai_next)
    if (r->ai_family == AF_INET) {
      pick = r;
      break;
    }
  std::memcpy(&out.ss, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  ::freeaddrinfo(res);
  if (out.family() == AF_INET)
    v4->sin_port = port;
  else
    v6->sin6_port = port;
  return out;
}

void set_nonblocking(int fd) {
  int flags = PSRT_SYS_CHECK(::fcntl(fd, F_GETFL, 0));
  PSRT_SYS_CHECK(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
}

void set_int_option(int fd, int level, int name, int value) {
  PSRT_SYS_CHECK(::setsockopt(fd, level, name, &value, sizeof value));
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                  std::chrono::steady_clock::now())
                .count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

}  // namespace

void Fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string host_of(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

HostPort parse_address(const std::string& address) {
  auto colon = address.rfind(':');
  auto bad = [&](const char* why) {
    return Error(ErrorCode::kInvalidArgument, "bad address '" + address + "': " + why +
                                                  " (expected HOST:PORT, e.g. 127.0.0.1:9100)");
  };
  if (colon == std::string::npos) throw bad("no ':'");
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);  // "[fd00::1]:9000"
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  auto [ptr, ec] = std::from_chars(first, last, hp.port);
  if (first == last || ec != std::errc() || ptr != last) throw bad("port is not a number");
  if (hp.port < 0 || hp.port > 65535) throw bad("port out of range 0..65535");
  return hp;
}

std::string join_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string peer_name(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    return join_address(buf, ntohs(a.sin6_port));
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return join_address(buf, ntohs(a.sin_port));
}

Fd listen_tcp(const std::string& address, std::string& bound) {
  HostPort hp = parse_address(address);
  SockAddr sa = resolve(hp);
  Fd fd(PSRT_SYS_CHECK(::socket(sa.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  set_int_option(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1);
  if (::bind(fd.get(), sa.get(), sa.len) != 0) {
    throw Error(ErrorCode::kSystem,
                "cannot listen on " + address + ": bind: " + errno_string(errno));
  }
  PSRT_SYS_CHECK(::listen(fd.get(), 1024));
  sockaddr_storage actual{};
  socklen_t len = sizeof actual;
  PSRT_SYS_CHECK(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&actual), &len));
  std::string host = hp.host.empty() || hp.host == "*" ? "0.0.0.0" : hp.host;
  const auto port = actual.ss_family == AF_INET6
                        ? reinterpret_cast<const sockaddr_in6&>(actual).sin6_port
                        : reinterpret_cast<const sockaddr_in&>(actual).sin_port;
  bound = join_address(host, ntohs(port));
  return fd;
}

Fd connect_tcp(const std::string& address, std::chrono::milliseconds timeout) {
  HostPort hp = parse_address(address);
  if (hp.port == 0) {
    throw Error(ErrorCode::kInvalidArgument, "cannot connect to '" + address + "': port 0");
  }
  SockAddr sa = resolve(hp);
  Fd fd(PSRT_SYS_CHECK(::socket(sa.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  int rc = ::connect(fd.get(), sa.get(), sa.len);
  if (rc != 0 && errno != EINPROGRESS) {
    throw Error(ErrorCode::kConnectionClosed,
                "cannot connect to " + address + ": " + errno_string(errno));
  }
  if (rc != 0) {
    pollfd p{fd.get(), POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      throw Error(ErrorCode::kTimeout, "cannot connect to " + address + ": no answer within " +
                                           std::to_string(timeout.count()) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      throw Error(ErrorCode::kConnectionClosed, "cannot connect to " + address + ": " +
                                                    errno_string(err) +
                                                    " (is the peer running and listening there?)");
    }
  }
  return fd;
}

Fd accept_tcp(int listen_fd, std::string& peer, int* error) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  int fd =
      ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return Fd();
    }
    if (error != nullptr) {
      *error = errno;
      return Fd();
    }
    throw_system_error("accept4", errno);
  }
  peer = peer_name(sa);
  return Fd(fd);
}

void tune_stream(int fd, std::chrono::milliseconds peer_timeout) {
  set_nonblocking(fd);
  set_int_option(fd, IPPROTO_TCP, TCP_NODELAY, 1);
  // Keepalive notices a silent dead host: idle + count * interval stays within peer_timeout.
  int total_s = std::max<int>(3, static_cast<int>(peer_timeout.count() / 1000));
  int idle = std::max(1, total_s / 3);
  int count = 3;
  int interval = std::max(1, (total_s - idle) / (count + 1));
  set_int_option(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
  set_int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle);
  set_int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL, interval);
  set_int_option(fd, IPPROTO_TCP, TCP_KEEPCNT, count);
  // Data that the peer does not acknowledge within peer_timeout fails the connection.
  set_int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(peer_timeout.count()));
}

void set_socket_buffers(int fd, int bytes) {
  // Best effort: the kernel caps these at net.core.{w,r}mem_max.
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void write_all(int fd, const void* data, std::size_t size,
               std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      if (::poll(&pfd, 1, remaining_ms(deadline)) == 0) {
        throw Error(ErrorCode::kTimeout, "handshake write timed out");
      }
      continue;
    }
    throw Error(ErrorCode::kConnectionClosed, "handshake write failed: " + errno_string(errno));
  }
}

void read_all(int fd, void* data, std::size_t size,
              std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0)
      throw Error(ErrorCode::kConnectionClosed, "peer closed the connection during the handshake");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, remaining_ms(deadline)) == 0) {
        throw Error(ErrorCode::kTimeout, "handshake read timed out");
      }
      continue;
    }
    throw Error(ErrorCode::kConnectionClosed, "handshake read failed: " + errno_string(errno));
  }
}

}  // namespace psrt::transport
