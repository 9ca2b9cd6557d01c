// A man in the middle on 127.0.0.1 for a tcp connection: forwards both ways and alters one
// client->server frame (flips, replays, drops, splices, or injects forged copies of it). Used by
// the secure mode's tests (secure_test.cc) and the drop metric's (tests/ps).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "psrt/error.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace psrt::transport::testing {

using namespace std::chrono_literals;

// kInject*: the relay sends a forged copy of the frame (a header or a payload byte flipped: what
// an attacker who sniffed the route can send without the key) ahead of the real one.
enum class Tamper {
  kFlipHeader,
  kFlipPayload,
  kReplay,
  kDrop,
  kCapture,
  kSplice,
  kInjectForgedHeader,
  kInjectForgedPayload,
  kSwapPayloadHalves  // the payload's two halves trade places (the secure mode's segments)
};

// A frame one relay captured (kCapture) for another to send instead of its own (kSplice).
struct CapturedFrame {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::byte> frame;
};

// Accepts one client, connects it to `target` and forwards both ways; the client->server frame
// number `at` (tcp frames: 24-byte prefix, header, payload) is altered as `tamper` says.
class Relay {
 public:
  // `copies`: how many forged copies kInject* sends.
  Relay(std::string target, Tamper tamper, int at, CapturedFrame* captured = nullptr,
        int copies = 1)
      : target_(std::move(target)), tamper_(tamper), at_(at), captured_(captured), copies_(copies) {
    listener_ = listen_tcp("127.0.0.1:0", address_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  static void send_all(int fd, const std::byte* p, std::size_t n) {
    write_all(fd, p, n, std::chrono::steady_clock::now() + 5s);
  }

  void forward_frames(int to) {
    constexpr std::size_t kPrefix = 24;
    while (cbuf_.size() >= kPrefix) {
      const auto header_len = wire::load<std::uint16_t>(cbuf_.data() + 6);
      const auto payload_len = wire::load<std::uint64_t>(cbuf_.data() + 8);
      const std::size_t total = kPrefix + header_len + payload_len;
      if (cbuf_.size() < total) return;
      const auto end = cbuf_.begin() + static_cast<std::ptrdiff_t>(total);
      std::vector<std::byte> frame(cbuf_.begin(), end);
      cbuf_.erase(cbuf_.begin(), end);
      const int index = frames_++;
      if (index == at_) {
        if (tamper_ == Tamper::kFlipHeader) frame[kPrefix + header_len - 17] ^= std::byte{0x01};
        if (tamper_ == Tamper::kFlipPayload)
          frame[kPrefix + header_len + payload_len / 2] ^= std::byte{0x80};
        if (tamper_ == Tamper::kSwapPayloadHalves) {
          const auto first = frame.begin() + static_cast<std::ptrdiff_t>(kPrefix + header_len);
          const auto half = static_cast<std::ptrdiff_t>(payload_len / 2);
          std::swap_ranges(first, first + half, first + half);
        }
        if (tamper_ == Tamper::kDrop) continue;
        if (tamper_ == Tamper::kInjectForgedHeader || tamper_ == Tamper::kInjectForgedPayload) {
          std::vector<std::byte> forged = frame;
          if (tamper_ == Tamper::kInjectForgedHeader)
            forged[kPrefix + header_len - 17] ^= std::byte{1};
          if (tamper_ == Tamper::kInjectForgedPayload)
            forged[kPrefix + header_len + payload_len / 2] ^= std::byte{0x80};
          for (int c = 0; c < copies_; ++c)
            send_all(to, forged.data(), forged.size());
        }
        if (tamper_ == Tamper::kReplay) send_all(to, frame.data(), frame.size());
        if (tamper_ == Tamper::kCapture) {
          std::lock_guard lock(captured_->mutex);
          captured_->frame = frame;
          captured_->cv.notify_all();
        }
        if (tamper_ == Tamper::kSplice) {
          std::unique_lock lock(captured_->mutex);
          captured_->cv.wait_for(lock, 5s, [&] { return !captured_->frame.empty(); });
          frame = captured_->frame;
        }
      }
      send_all(to, frame.data(), frame.size());
    }
  }

  void run() {
    Fd client, server;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!stop_ && !client && std::chrono::steady_clock::now() < deadline) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        std::string peer;
        client = accept_tcp(listener_.get(), peer);
      }
    }
    if (!client) return;
    server = connect_tcp(target_, 5s);
    std::vector<std::byte> buf(1 << 16);
    while (!stop_) {
      pollfd p[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        ssize_t n = ::recv(client.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
        if (n > 0) {
          cbuf_.insert(cbuf_.end(), buf.begin(), buf.begin() + n);
          try {
            forward_frames(server.get());
          } catch (const Error&) {
            return;  // the server closed its side
          }
        }
      }
      if (p[1].revents) {
        ssize_t n = ::recv(server.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;  // closes both
        if (n > 0) {
          try {
            send_all(client.get(), buf.data(), static_cast<std::size_t>(n));
          } catch (const Error&) {
            return;
          }
        }
      }
    }
  }

  std::string target_;
  Tamper tamper_;
  int at_;
  Fd listener_;
  std::string address_;
  std::vector<std::byte> cbuf_;
  int frames_ = 0;
  CapturedFrame* captured_;
  int copies_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace psrt::transport::testing
