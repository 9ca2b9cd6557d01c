// TCP socket plumbing shared by the tcp backend and the UCX backend's bootstrap channel.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>

namespace psrt::transport {

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "host:port" (host may be a name, an IPv4 address, an IPv6 address in brackets as in
// "[fd00::1]:9000" (returned without them), or empty for all interfaces).
// Throws psrt::Error(kInvalidArgument) that quotes the string and says the expected form.
HostPort parse_address(const std::string& address);

// The host part of a peer's "host:port" or "[v6]:port" (brackets dropped), for counting and
// naming peers per host; the whole string when it has no ':'. Never throws.
std::string host_of(const std::string& address);

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() noexcept;
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A non-blocking listening socket bound to `address`; `bound` receives "host:port" with the
// port actually chosen.
Fd listen_tcp(const std::string& address, std::string& bound);

// Connects (bounded by `timeout`), returns a non-blocking connected socket with TCP_NODELAY.
Fd connect_tcp(const std::string& address, std::chrono::milliseconds timeout);

// Accepts one pending connection (non-blocking); returns an empty Fd on EAGAIN. Other failures
// throw psrt::Error, or, with `error`, return an empty Fd and set *error to errno.
Fd accept_tcp(int listen_fd, std::string& peer, int* error = nullptr);

// Applies the options every psrt stream gets: TCP_NODELAY, keepalive and TCP_USER_TIMEOUT
// derived from `peer_timeout` so that a dead host is noticed within it.
void tune_stream(int fd, std::chrono::milliseconds peer_timeout);

// Sets big kernel socket buffers for bulk transfer.
void set_socket_buffers(int fd, int bytes);

// Blocking helpers with a deadline for short handshakes; throw psrt::Error on timeout or EOF.
void write_all(int fd, const void* data, std::size_t size,
               std::chrono::steady_clock::time_point deadline);
void read_all(int fd, void* data, std::size_t size, std::chrono::steady_clock::time_point deadline);

// "10.0.0.3:41234", "[fd00::3]:41234".
std::string peer_name(const sockaddr_storage& addr);
std::string join_address(const std::string& host, int port);

}  // namespace psrt::transport
