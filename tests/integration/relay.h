// A TCP relay for attack tests: forwards every byte between a client and a target, and can hold
// what the client sends after a given number of bytes (a message left half-sent, as a slow or
// hostile peer leaves it).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/socket.h"

namespace psrt::test {

// A TCP relay between this process's transport and a server. It forwards every byte both ways,
// except that once armed it forwards only `bytes` more toward the server and holds the rest until
// released: a message left half-sent, as a slow or hostile peer leaves it.
class Relay {
 public:
  explicit Relay(std::string target) : target_(std::move(target)) {
    listen_ = transport::listen_tcp("127.0.0.1:0", address_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }
  void hold_after(std::size_t bytes) {
    std::lock_guard lock(mu_);
    allowance_ = bytes;
  }
  // True once the armed number of bytes went to the server.
  bool wait_held(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return allowance_ && *allowance_ == 0; });
  }
  void release() {
    std::lock_guard lock(mu_);
    allowance_.reset();
  }

 private:
  void run() {
    transport::Fd client;
    while (!stop_ && !client) {
      pollfd p{listen_.get(), POLLIN, 0};
      ::poll(&p, 1, 20);
      std::string peer;
      client = transport::accept_tcp(listen_.get(), peer);
    }
    if (!client) return;
    transport::Fd server = transport::connect_tcp(target_, std::chrono::seconds(5));
    std::vector<char> up;  // from the client, not yet forwarded
    char buf[1 << 16];
    while (!stop_) {
      pollfd p[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
      ::poll(p, 2, 10);
      if (up.size() < (8u << 20)) {
        ssize_t n = ::recv(client.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0) return;
        if (n > 0) up.insert(up.end(), buf, buf + n);
      }
      ssize_t n = ::recv(server.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) return;
      if (n > 0 && !send_all(client.get(), buf, static_cast<std::size_t>(n))) return;
      std::size_t take = up.size();
      {
        std::lock_guard lock(mu_);
        if (allowance_) take = std::min(take, *allowance_);
      }
      if (take == 0) continue;
      if (!send_all(server.get(), up.data(), take)) return;
      up.erase(up.begin(), up.begin() + static_cast<std::ptrdiff_t>(take));
      std::lock_guard lock(mu_);
      if (allowance_) *allowance_ -= take;
      cv_.notify_all();
    }
  }
  static bool send_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  const std::string target_;
  std::string address_;
  transport::Fd listen_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::size_t> allowance_;
  std::thread thread_;
};

}  // namespace psrt::test
