// Test helpers for the transport conformance suite: a receiver that records what arrives and can
// echo it back, with bounded waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/factory.h"
#include "transport/transport.h"

namespace psrt::transport::testing {

using namespace std::chrono_literals;

// The suites run against every built backend, plain and in the secure mode ("tcp+secure").
inline constexpr std::string_view kSecureSuffix = "+secure";
inline constexpr const char* kTestSecret = "transport-test-secret-0123456789";

inline std::vector<std::string> test_backends() {
  std::vector<std::string> all;
  for (const auto& b : available_backends()) {
    all.push_back(b);
    all.push_back(b + std::string(kSecureSuffix));
  }
  return all;
}

// Creates the backend a suite parameter names; "+secure" seals it with kTestSecret.
inline std::unique_ptr<Transport> create_for_test(std::string name, std::shared_ptr<Receiver> rx,
                                                  Options options = {}) {
  if (name.ends_with(kSecureSuffix)) {
    name.resize(name.size() - kSecureSuffix.size());
    options.secure_secret = kTestSecret;
  }
  return create_transport(name, std::move(rx), options);
}

inline std::vector<std::byte> pattern(std::size_t size, std::uint32_t seed) {
  std::vector<std::byte> v(size);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (std::size_t i = 0; i < size; ++i) {
    x = x * 1103515245u + 12345u;
    v[i] = static_cast<std::byte>(x >> 24);
  }
  return v;
}

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

inline std::string string_of(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

struct ReceivedMessage {
  std::uint64_t conn_id = 0;
  std::string header;
  std::vector<std::byte> payload;
  void* dest = nullptr;
  std::uint64_t cookie = 0;
};

struct ClosedConnection {
  std::uint64_t conn_id = 0;
  Status why;
  std::chrono::steady_clock::time_point at;
};

class RecordingReceiver : public Receiver {
 public:
  using Placer = std::function<Placement(Connection&, std::span<const std::byte>, std::size_t)>;
  // Optional: choose the placement (default: a fresh buffer per message, kept by the receiver).
  // Thread-safe: the progress thread may be delivering meanwhile (a secure handshake's messages).
  void set_placer(Placer p) {
    std::lock_guard lock(mutex_);
    placer_ = std::move(p);
  }
  // Echo every message back on its connection (header and payload).
  bool echo = false;
  // Keep payload copies (off for big streams).
  bool keep_payloads = true;

  void on_connected(const std::shared_ptr<Connection>& conn) override {
    std::lock_guard lock(mutex_);
    connected_.push_back(conn);
    cv_.notify_all();
  }

  Placement place(Connection& conn, std::span<const std::byte> header,
                  std::size_t payload_size) override {
    Placer placer;
    {
      std::lock_guard lock(mutex_);
      placer = placer_;
    }
    if (placer) return placer(conn, header, payload_size);
    auto buf = std::make_shared<std::vector<std::byte>>(payload_size);
    std::lock_guard lock(mutex_);
    buffers_.push_back(buf);
    return Placement{{buf->data(), buf->size()}, buffers_.size() - 1};
  }

  void on_message(Connection& conn, std::span<const std::byte> header,
                  const Placement& p) override {
    ReceivedMessage m;
    m.conn_id = conn.id();
    m.header = string_of(header);
    m.dest = p.dest.data;
    m.cookie = p.cookie;
    if (keep_payloads && p.dest.size > 0) {
      auto* d = static_cast<const std::byte*>(p.dest.data);
      m.payload.assign(d, d + p.dest.size);
    }
    if (echo) {
      auto copy = std::make_shared<std::vector<std::byte>>(
          static_cast<const std::byte*>(p.dest.data),
          static_cast<const std::byte*>(p.dest.data) + p.dest.size);
      ConstBuffer b{copy->data(), copy->size()};
      conn.send(header, std::span<const ConstBuffer>(&b, copy->empty() ? 0 : 1),
                [copy](const Status&) {});
    }
    std::lock_guard lock(mutex_);
    if (!placer_ && p.dest.size > 0) buffers_[p.cookie].reset();
    messages_.push_back(std::move(m));
    ++message_count_;
    cv_.notify_all();
  }

  void on_closed(Connection& conn, const Status& why) override {
    std::lock_guard lock(mutex_);
    closed_.push_back({conn.id(), why, std::chrono::steady_clock::now()});
    cv_.notify_all();
  }

  bool wait_messages(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return message_count_ >= n; });
  }
  bool wait_closed(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return closed_.size() >= n; });
  }
  bool wait_connected(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return connected_.size() >= n; });
  }

  std::vector<ReceivedMessage> messages() {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  std::size_t message_count() {
    std::lock_guard lock(mutex_);
    return message_count_;
  }
  std::vector<ClosedConnection> closed() {
    std::lock_guard lock(mutex_);
    return closed_;
  }
  std::vector<std::shared_ptr<Connection>> connected() {
    std::lock_guard lock(mutex_);
    return connected_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  Placer placer_;  // guarded by mutex_
  std::vector<std::shared_ptr<Connection>> connected_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> buffers_;
  std::vector<ReceivedMessage> messages_;
  std::size_t message_count_ = 0;
  std::vector<ClosedConnection> closed_;
};

// Waits for one send's completion.
class SendWaiter {
 public:
  SendDone callback() {
    return [this](const Status& st) {
      std::lock_guard lock(mutex_);
      statuses_.push_back(st);
      cv_.notify_all();
    };
  }
  bool wait(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return statuses_.size() >= n; });
  }
  std::vector<Status> statuses() {
    std::lock_guard lock(mutex_);
    return statuses_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Status> statuses_;
};

}  // namespace psrt::transport::testing
