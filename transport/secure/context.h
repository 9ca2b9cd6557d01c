// The secure mode (Options::secure_secret): a decorator around any backend. SecureTransport wraps
// the backend's Transport, SecureConnection its connections, and SecureContext is the Receiver
// the backend reports to: it runs the handshake (handshake.h) on each new connection before the
// caller's Receiver hears of it, opens every sealed message and hands the caller the plaintext.
//
// Threads: the backend runs every callback on its progress thread, so the handshake, opening and
// delivery run there too; sealing runs in the sending thread. Both hand a large payload's
// segments to the crypt pool as well (crypt_pool.h). A connection that is still in its
// handshake after Options::connect_timeout is closed by a small timer thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/secure/crypt_pool.h"
#include "transport/secure/segments.h"
#include "transport/transport.h"

namespace psrt::transport::secure {

class SecureConnection;

// Ciphertext of one send, owned by that send until it completes.
struct CipherBuffer {
  std::unique_ptr<std::byte[]> data;
  std::size_t capacity = 0;
};

class SecureContext final : public Receiver, public std::enable_shared_from_this<SecureContext> {
 public:
  SecureContext(std::shared_ptr<Receiver> upper, Options options);
  ~SecureContext() override;

  void start();
  // Stops the timer thread. After the backend's shutdown (no callback runs any more), with
  // `release_upper` it also lets go of the caller's receiver, which breaks the cycle receiver ->
  // its connections -> this -> receiver.
  void shutdown(bool release_upper = false);

  // The backend's callbacks (progress thread).
  void on_connected(const std::shared_ptr<Connection>& conn) override;
  Placement place(Connection& conn, std::span<const std::byte> header,
                  std::size_t payload_size) override;
  void on_message(Connection& conn, std::span<const std::byte> header,
                  const Placement& placement) override;
  void on_closed(Connection& conn, const Status& why) override;

  // connect(): announce an outgoing connection attempt, then claim the connection the backend
  // made (or the reason its handshake already failed) by the backend's connection id.
  void begin_connect();
  std::shared_ptr<SecureConnection> claim(std::uint64_t id);
  void end_connect();

  Receiver& upper() { return *upper_; }
  const Options& options() const { return options_; }
  const std::string& secret() const { return options_.secure_secret; }

  // Seals and opens payload segments in parallel (thread-safe).
  CryptPool& crypt_pool() { return crypt_pool_; }

  CipherBuffer acquire(std::size_t size);
  void release(CipherBuffer buffer);

  // Messages dropped (forged or replayed) on any of this transport's connections. Thread-safe.
  void count_dropped() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<SecureConnection> find(std::uint64_t id);
  void reap();

  const Options options_;
  std::shared_ptr<Receiver> upper_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, std::shared_ptr<SecureConnection>> connections_;
  std::unordered_map<std::uint64_t, std::vector<std::vector<std::byte>>> early_;
  // Connections that closed while a connect() was under way (in the handshake, or right after
  // it), for that connect() to claim: the backend's progress thread may run the whole handshake
  // and the close before the connecting thread gets to claim().
  std::unordered_map<std::uint64_t, std::shared_ptr<SecureConnection>> failed_;
  int connecting_ = 0;
  std::multimap<std::chrono::steady_clock::time_point, std::weak_ptr<SecureConnection>> deadlines_;
  bool stopping_ = false;
  std::thread reaper_;

  std::mutex pool_mutex_;
  std::vector<CipherBuffer> pool_;
  std::atomic<std::uint64_t> dropped_{0};
  CryptPool crypt_pool_{CryptPool::threads_for(kMaxSegments)};
};

class SecureTransport final : public Transport {
 public:
  using MakeInner = std::function<std::unique_ptr<Transport>(std::shared_ptr<Receiver>, Options)>;
  SecureTransport(std::shared_ptr<Receiver> receiver, Options options, const MakeInner& make_inner);
  ~SecureTransport() override;

  std::string_view name() const override { return inner_->name(); }
  std::string listen(const std::string& address) override { return inner_->listen(address); }
  std::shared_ptr<Connection> connect(const std::string& address) override;
  // Payloads are sealed and opened in host memory.
  bool supports(MemoryType type) const override { return type == MemoryType::kHost; }
  void register_memory(MutableBuffer region) override;
  void unregister_memory(const void* base) override { inner_->unregister_memory(base); }
  bool is_registered(const void* data, std::size_t size) const override {
    return inner_->is_registered(data, size);
  }
  void shutdown() override;
  bool on_progress_thread() const override { return inner_->on_progress_thread(); }
  std::uint64_t dropped_messages() const override { return ctx_->dropped(); }

 private:
  std::shared_ptr<SecureContext> ctx_;
  std::unique_ptr<Transport> inner_;
};

}  // namespace psrt::transport::secure
