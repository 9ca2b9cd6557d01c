#include "transport_bench.h"

#include <sys/mman.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "peer_process.h"
#include "runtime/job_secret.h"
#include "transport/factory.h"
#include "transport/wire.h"

namespace psrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Per-iteration timestamps from the TSC, as ucx_perftest takes them (a clock_gettime costs about
// twice as much here and would be charged to every iteration), calibrated against steady_clock.
class TscClock {
 public:
  TscClock() {
    auto t0 = Clock::now();
    std::uint64_t c0 = __rdtsc();
    while (Clock::now() - t0 < std::chrono::milliseconds(50)) {
    }
    std::uint64_t c1 = __rdtsc();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    us_per_tick_ = us / static_cast<double>(c1 - c0);
  }
  static std::uint64_t now() { return __rdtsc(); }
  double to_us(std::uint64_t ticks) const { return static_cast<double>(ticks) * us_per_tick_; }

 private:
  double us_per_tick_ = 0;
};
using transport::Connection;
using transport::Placement;

// The benchmark's own 16-byte message header: kind, then a value whose meaning depends on it.
enum class Kind : std::uint32_t { kPing = 1, kPong = 2, kData = 3, kAck = 4, kBye = 5 };
constexpr std::size_t kBenchHeaderBytes = 16;

struct BenchHeader {
  Kind kind;
  std::uint64_t value;
};

std::array<std::byte, kBenchHeaderBytes> encode(BenchHeader h) {
  std::array<std::byte, kBenchHeaderBytes> out{};
  wire::store<std::uint32_t>(out.data(), static_cast<std::uint32_t>(h.kind));
  wire::store<std::uint64_t>(out.data() + 8, h.value);
  return out;
}

BenchHeader decode(std::span<const std::byte> in) {
  if (in.size() != kBenchHeaderBytes) {
    throw Error(ErrorCode::kProtocol, "psbench header of " + std::to_string(in.size()) + " bytes");
  }
  return {static_cast<Kind>(wire::load<std::uint32_t>(in.data())),
          wire::load<std::uint64_t>(in.data() + 8)};
}

// Page-aligned, pre-faulted buffer, registered with the transport like ucx_perftest's buffers.
class BenchBuffer {
 public:
  explicit BenchBuffer(std::size_t size) : size_(std::max<std::size_t>(size, 4096)) {
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error(ErrorCode::kSystem, "cannot allocate the benchmark buffer");
    data_ = static_cast<std::byte*>(p);
    std::memset(data_, 0x5a, size_);
  }
  ~BenchBuffer() { ::munmap(data_, size_); }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::size_t size_;
  std::byte* data_;
};

const transport::SendDone ignore_failure = [](const Status& st) {
  if (!st.ok()) PSRT_LOG_ERROR("psbench: send failed: {}", st.message());
};

// ---- passive side ------------------------------------------------------------------------

class PeerReceiver final : public transport::Receiver {
 public:
  explicit PeerReceiver(std::size_t max_size) : recv_(max_size), send_(max_size) {}
  void attach(transport::Transport& t) {
    t.register_memory({recv_.data(), recv_.size()});
    t.register_memory({send_.data(), send_.size()});
  }
  Placement place(Connection&, std::span<const std::byte>, std::size_t size) override {
    if (size > recv_.size()) throw Error(ErrorCode::kInvalidArgument, "message larger than --size");
    return Placement{{recv_.data(), size}};
  }
  void on_message(Connection& conn, std::span<const std::byte> header,
                  const Placement& p) override {
    BenchHeader h = decode(header);
    switch (h.kind) {
      case Kind::kPing: {
        auto reply = encode({Kind::kPong, h.value});
        ConstBuffer b{send_.data(), p.dest.size};
        conn.send(reply, std::span<const ConstBuffer>(&b, p.dest.size ? 1 : 0), ignore_failure);
        break;
      }
      case Kind::kData:
        if (++received_ == h.value) {
          received_ = 0;
          auto ack = encode({Kind::kAck, h.value});
          conn.send(ack, {}, ignore_failure);
        }
        break;
      case Kind::kBye:
        if (!finished_.exchange(true)) done_.set_value();
        break;
      default:
        throw Error(ErrorCode::kProtocol, "unexpected psbench message kind");
    }
  }
  void on_closed(Connection&, const Status& why) override {
    if (!finished_ && !why.ok() && why.code() != ErrorCode::kConnectionClosed) {
      PSRT_LOG_WARN("psbench peer: connection closed: {}", why.message());
    }
    if (!finished_.exchange(true)) done_.set_value();
  }
  void wait() { done_.get_future().wait(); }

 private:
  BenchBuffer recv_;
  BenchBuffer send_;
  std::uint64_t received_ = 0;
  std::promise<void> done_;
  std::atomic<bool> finished_{false};
};

// ---- active side --------------------------------------------------------------------------

class ClientReceiver final : public transport::Receiver {
 public:
  explicit ClientReceiver(std::size_t max_size) : send_(max_size), recv_(max_size) {}
  void attach(transport::Transport& t) {
    t.register_memory({recv_.data(), recv_.size()});
    t.register_memory({send_.data(), send_.size()});
  }

  // Ping-pong `iters` times with `size`-byte payloads, driven from the progress thread.
  std::vector<double> run_lat(const std::shared_ptr<Connection>& conn, std::size_t size,
                              int iters) {
    conn_ = conn;
    size_ = size;
    remaining_ = iters;
    samples_.clear();
    samples_.reserve(static_cast<std::size_t>(iters));
    done_ = std::promise<void>();
    auto f = done_.get_future();
    t_ = TscClock::now();
    send_ping();
    f.wait();
    return samples_;
  }

  // Streams `iters` messages with at most `window` outstanding; returns seconds until the ack.
  double run_bw(const std::shared_ptr<Connection>& conn, std::size_t size, int iters, int window) {
    conn_ = conn;
    size_ = size;
    to_issue_ = iters;
    total_ = static_cast<std::uint64_t>(iters);
    done_ = std::promise<void>();
    auto f = done_.get_future();
    auto start = Clock::now();
    for (int i = 0; i < std::min(window, iters); ++i)
      issue_data();
    f.wait();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  Placement place(Connection&, std::span<const std::byte>, std::size_t size) override {
    return Placement{{recv_.data(), size}};
  }
  void on_message(Connection&, std::span<const std::byte> header, const Placement&) override {
    BenchHeader h = decode(header);
    if (h.kind == Kind::kAck) {
      done_.set_value();
      return;
    }
    std::uint64_t now = TscClock::now();
    samples_.push_back(tsc_.to_us(now - t_) / 2);
    t_ = now;
    if (--remaining_ > 0) {
      send_ping();
    } else {
      done_.set_value();
    }
  }
  void finishing() { finishing_ = true; }
  void on_closed(Connection&, const Status& why) override {
    if (!finishing_ && !why.ok() && why.code() != ErrorCode::kCancelled) {
      PSRT_LOG_ERROR("psbench: connection lost: {}", why.message());
      std::exit(2);
    }
  }

 private:
  void send_ping() {
    auto h = encode({Kind::kPing, 0});
    ConstBuffer b{send_.data(), size_};
    conn_->send(h, std::span<const ConstBuffer>(&b, size_ ? 1 : 0), ignore_failure);
  }
  void issue_data() {
    --to_issue_;
    auto h = encode({Kind::kData, total_});
    ConstBuffer b{send_.data(), size_};
    conn_->send(h, std::span<const ConstBuffer>(&b, size_ ? 1 : 0), [this](const Status& st) {
      if (!st.ok()) {
        PSRT_LOG_ERROR("psbench: send failed: {}", st.message());
        std::exit(2);
      }
      if (to_issue_ > 0) issue_data();
    });
  }

  BenchBuffer send_;
  BenchBuffer recv_;
  std::shared_ptr<Connection> conn_;
  std::size_t size_ = 0;
  int remaining_ = 0;
  int to_issue_ = 0;
  std::uint64_t total_ = 0;
  std::vector<double> samples_;
  TscClock tsc_;
  std::uint64_t t_ = 0;
  std::promise<void> done_;
  std::atomic<bool> finishing_{false};
};

// The secure mode's secret (PSRT_SECRET, PSRT_SECRET_FILE, else a fresh one), put into
// PSRT_SECRET so that the peer process started from here inherits it.
std::string bench_secret() {
  std::string secret = runtime::job_secret(runtime::NoSecret::kGenerate);
  ::setenv("PSRT_SECRET", secret.c_str(), 1);
  return secret;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(std::llround(q * static_cast<double>(v.size() - 1)));
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace

int run_transport_peer(const std::string& transport_name, const std::string& listen_address,
                       std::size_t max_size, bool secure) {
  log::set_prefix("psbench-peer");
  auto rx = std::make_shared<PeerReceiver>(max_size);
  transport::Options options;
  if (secure) options.secure_secret = bench_secret();
  auto t = transport::create_transport(transport_name, rx, options);
  rx->attach(*t);
  announce_listening(t->listen(listen_address));
  rx->wait();
  t->shutdown();
  return 0;
}

int run_transport_bench(const TransportBenchConfig& cfg) {
  log::set_prefix("psbench");
  std::size_t max_size = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  std::unique_ptr<PeerProcess> peer;
  std::string address = cfg.connect;
  if (!cfg.listen.empty())
    return run_transport_peer(cfg.transport, cfg.listen, max_size, cfg.secure);
  transport::Options options;
  if (cfg.secure) options.secure_secret = bench_secret();  // before the peer inherits it
  if (address.empty()) {
    std::vector<std::string> args{
        "transport-peer", "--transport", cfg.transport,           "--listen",
        "127.0.0.1:0",    "--max-size",  std::to_string(max_size)};
    if (cfg.secure) args.emplace_back("--secure");
    peer = std::make_unique<PeerProcess>(args, std::chrono::seconds(30));
    address = peer->address();
  }
  auto rx = std::make_shared<ClientReceiver>(max_size);
  auto t = transport::create_transport(cfg.transport, rx, options);
  rx->attach(*t);
  auto conn = t->connect(address);
  int warmup = cfg.warmup >= 0 ? cfg.warmup : std::max(10, cfg.iters / 10);

  for (std::size_t size : cfg.sizes) {
    nlohmann::json out;
    out["bench"] = "transport";
    out["transport"] = cfg.transport;
    out["mode"] = cfg.mode;
    out["secure"] = cfg.secure;
    out["size"] = size;
    out["iters"] = cfg.iters;
    if (cfg.mode == "lat") {
      if (warmup > 0) rx->run_lat(conn, size, warmup);
      auto samples = rx->run_lat(conn, size, cfg.iters);
      double sum = 0;
      for (double s : samples)
        sum += s;
      double avg = sum / static_cast<double>(samples.size());
      out["lat_us_p50"] = percentile(samples, 0.50);
      out["lat_us_p99"] = percentile(samples, 0.99);
      out["lat_us_avg"] = avg;
      out["bandwidth_MBps"] = static_cast<double>(size) / avg / 1.048576;
    } else {
      if (warmup > 0) rx->run_bw(conn, size, warmup, cfg.window);
      double secs = rx->run_bw(conn, size, cfg.iters, cfg.window);
      out["window"] = cfg.window;
      // MB = 2^20 bytes, as ucx_perftest counts them.
      out["bandwidth_MBps"] = static_cast<double>(size) * cfg.iters / secs / (1024.0 * 1024.0);
      out["msg_per_sec"] = cfg.iters / secs;
      out["lat_us_p50"] = nullptr;
      out["lat_us_p99"] = nullptr;
    }
    std::cout << out.dump() << std::endl;
  }
  rx->finishing();
  auto bye = encode({Kind::kBye, 0});
  std::promise<void> sent;
  conn->send(bye, {}, [&](const Status&) { sent.set_value(); });
  sent.get_future().wait();
  if (peer) peer->wait_exit(std::chrono::seconds(5));
  t->shutdown();
  return 0;
}

}  // namespace psrt::bench
