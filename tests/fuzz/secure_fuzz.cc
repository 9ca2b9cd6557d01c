// libFuzzer target for the secure mode's sealed framing (transport/secure): every frame a secure
// connection receives after its handshake is attacker-controlled on an untrusted network. The
// script an input encodes is in secure_fuzz.h. Build and run with clang (from the repository
// root), or `make fuzz` for every target:
//
//   CXX=clang++ CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
//   cmake --build build-fuzz --target secure_fuzz && mkdir -p build-fuzz/secure_corpus &&
//   build-fuzz/bin/secure_fuzz -max_total_time=60 build-fuzz/secure_corpus tests/fuzz/secure_corpus
//
// A crashing input is written to ./crash-<sha1>; replay it with `build-fuzz/bin/secure_fuzz FILE`.
// `secure_fuzz_corpus_test --write tests/fuzz/secure_corpus` regenerates the seeds.
#include "tests/fuzz/secure_fuzz.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "psrt/error.h"
#include "transport/secure/context.h"
#include "transport/transport.h"

namespace psrt::transport::secure::fuzz {
namespace {

constexpr std::size_t kMaxOps = 64;
constexpr int kMaxLargeSends = 2;        // payloads of 256 KiB and more, per input
constexpr std::size_t kMaxHistory = 64;  // frames kept for REPLAY
constexpr std::size_t kMaxResizedPayload = std::size_t{2} << 20;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "secure_fuzz: invariant broken: %s\n", what);
  std::abort();
}

struct Frame {
  std::vector<std::byte> header;
  std::vector<std::byte> payload;
  bool operator==(const Frame&) const = default;
};

// The backend's end of one connection: keeps each frame the secure layer sends on it.
class WireEnd final : public Connection {
 public:
  explicit WireEnd(std::uint64_t id) : id_(id) {}
  void send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
            SendDone done) override {
    if (!open_ || header.size() > kMaxHeaderBytes) {
      return done(Status(ErrorCode::kConnectionClosed, "not sent"));
    }
    Frame f{{header.begin(), header.end()}, {}};
    for (const ConstBuffer& b : payload) {
      const auto* p = static_cast<const std::byte*>(b.data);
      f.payload.insert(f.payload.end(), p, p + b.size);
    }
    sent.push_back(std::move(f));
    done(Status{});
  }
  void close() override { open_ = false; }
  const std::string& peer() const override { return peer_; }
  std::uint64_t id() const override { return id_; }
  bool is_open() const override { return open_; }

  std::deque<Frame> sent;

 private:
  const std::uint64_t id_;
  bool open_ = true;
  const std::string peer_ = "127.0.0.1:1";
};

// A context's receiver: the connection it was given and what arrived on it.
class Upper final : public Receiver {
 public:
  void on_connected(const std::shared_ptr<Connection>& c) override { conn = c; }
  Placement place(Connection& /*conn*/, std::span<const std::byte> /*header*/,
                  std::size_t payload_size) override {
    require(!closed, "a placement asked for after the connection closed");
    buffers_.emplace_back(payload_size);
    delivered_.push_back(false);
    return Placement{MutableBuffer{buffers_.back().data(), payload_size}, buffers_.size() - 1};
  }
  void on_message(Connection& /*conn*/, std::span<const std::byte> header,
                  const Placement& placement) override {
    require(!closed, "a message delivered after the connection closed");
    Frame got{{header.begin(), header.end()}, {}};
    if (placement.dest.size > 0) {
      require(placement.cookie < buffers_.size() &&
                  placement.dest.data == buffers_[placement.cookie].data(),
              "a message delivered in a buffer its receiver did not place");
      got.payload = buffers_[placement.cookie];
      delivered_[placement.cookie] = true;
    }
    received.push_back(std::move(got));
  }
  void on_closed(Connection& /*conn*/, const Status& /*why*/) override {
    require(!closed, "on_closed ran twice");
    closed = true;
  }

  // Nothing unauthenticated stays where the receiver looks: a buffer it placed for a message
  // that was never delivered holds zeros.
  void check_undelivered_buffers_are_zero() const {
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      if (delivered_[i]) continue;
      require(std::all_of(buffers_[i].begin(), buffers_[i].end(),
                          [](std::byte b) { return b == std::byte{0}; }),
              "a placed buffer of an undelivered message holds bytes");
    }
  }

  std::shared_ptr<Connection> conn;
  std::vector<Frame> received;
  bool closed = false;

 private:
  std::deque<std::vector<std::byte>> buffers_;  // a deque: placed buffers never move
  std::vector<bool> delivered_;                 // per placed buffer: a message was delivered in it
};

// The input, read as the script's bytes; reads past its end give zeros.
class Script {
 public:
  explicit Script(std::span<const std::byte> in) : in_(in) {}
  bool done() const { return pos_ >= in_.size(); }
  std::uint32_t read(int bytes) {
    std::uint32_t v = 0;
    for (int i = 0; i < bytes; ++i, ++pos_)
      if (pos_ < in_.size()) v |= static_cast<std::uint32_t>(in_[pos_]) << (8 * i);
    return v;
  }
  std::vector<std::byte> take(std::size_t n) {
    const std::size_t from = std::min(pos_, in_.size());
    const std::size_t got = std::min(n, in_.size() - from);
    std::vector<std::byte> out(in_.begin() + static_cast<std::ptrdiff_t>(from),
                               in_.begin() + static_cast<std::ptrdiff_t>(from + got));
    out.resize(n);
    pos_ += n;
    return out;
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

std::vector<std::byte> pattern(std::size_t n, std::size_t message, std::size_t salt) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = std::byte(static_cast<std::uint8_t>(message * 131 + salt * 17 + i * 13 + 1));
  return out;
}

// A secure connection between contexts A and B after an honest handshake, with the harness
// playing both ends' backend and the network between them.
class Link {
 public:
  Link() {
    Options o;
    o.secure_secret = "secure-fuzz-job-secret-0001";
    a_ = std::make_shared<SecureContext>(a_upper_, o);
    b_ = std::make_shared<SecureContext>(b_upper_, o);
    a_->on_connected(a_wire_);
    b_->on_connected(b_wire_);
    while (!a_wire_->sent.empty() || !b_wire_->sent.empty()) {  // HELLOs, then CONFIRMs
      for (; !a_wire_->sent.empty(); a_wire_->sent.pop_front())
        b_->on_message(*b_wire_, a_wire_->sent.front().header, Placement{});
      for (; !b_wire_->sent.empty(); b_wire_->sent.pop_front())
        a_->on_message(*a_wire_, b_wire_->sent.front().header, Placement{});
    }
    require(a_upper_->conn && b_upper_->conn, "the honest handshake failed");
  }
  ~Link() {
    a_->shutdown(/*release_upper=*/true);
    b_->shutdown(/*release_upper=*/true);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void run(Script& s) {
    for (std::size_t op = 0; op < kMaxOps && !s.done() && !b_upper_->closed; ++op) {
      step(s);
      check();
    }
    b_upper_->check_undelivered_buffers_are_zero();
  }

  std::string outcome() const {
    return "delivered=" + std::to_string(b_upper_->received.size()) +
           " dropped=" + std::to_string(b_->dropped()) + (b_upper_->closed ? " closed" : " open");
  }

 private:
  void step(Script& s) {
    switch (s.read(1) % 8) {
      case 0:
        return send(s);
      case 1:
        if (auto f = pop()) hand_to_b(*f);
        return;
      case 2:
        return flip(s);
      case 3: {
        const std::uint32_t which = s.read(1);
        if (!history_.empty()) hand_to_b(history_[which % history_.size()]);
        return;
      }
      case 4:
        pop();
        return;
      case 5: {
        const std::size_t header = s.read(1) % (kMaxHeaderBytes + 1);
        const std::size_t payload = s.read(2) % 8193;
        Frame f{s.take(header), {}};
        f.payload = s.take(payload);
        return hand_to_b(f);
      }
      case 6:
        return resize(s);
      default:
        if (in_flight_.size() >= 2) std::swap(in_flight_[0], in_flight_[1]);
        return;
    }
  }

  void send(Script& s) {
    const std::size_t header_len = 1 + s.read(1) % 64;
    const std::uint32_t size_class = s.read(1) % 4;
    const std::uint32_t x = s.read(2);
    std::size_t payload_len = 0;
    if (size_class == 1 || (size_class >= 2 && large_sends_ >= kMaxLargeSends)) {
      payload_len = 1 + x % 4096;
    } else if (size_class >= 2) {
      payload_len = (size_class == 2 ? std::size_t{256} << 10 : std::size_t{512} << 10) + x;
      ++large_sends_;
    }
    const std::size_t n = sent_.size();
    Frame m{pattern(header_len, n, 1), pattern(payload_len, n, 2)};
    const ConstBuffer body{m.payload.data(), m.payload.size()};
    a_upper_->conn->send(m.header, std::span(&body, payload_len > 0 ? 1 : 0),
                         [](const Status& st) { require(st.ok(), "an honest send failed"); });
    require(a_wire_->sent.size() == 1, "one send, one frame");
    in_flight_.push_back(std::move(a_wire_->sent.front()));
    a_wire_->sent.clear();
    sent_.push_back(std::move(m));
  }

  std::optional<Frame> pop() {
    if (in_flight_.empty()) return std::nullopt;
    Frame f = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (history_.size() < kMaxHistory) history_.push_back(f);
    return f;
  }

  void flip(Script& s) {
    const std::uint32_t at = s.read(3);
    const std::uint32_t mask = s.read(1);
    auto f = pop();
    if (!f) return;
    const std::size_t i = at % (f->header.size() + f->payload.size());
    std::byte& b = i < f->header.size() ? f->header[i] : f->payload[i - f->header.size()];
    b ^= std::byte(static_cast<std::uint8_t>(mask == 0 ? 1 : mask));
    hand_to_b(*f);
  }

  void resize(Script& s) {
    const auto delta = static_cast<std::int16_t>(s.read(2));
    auto f = pop();
    if (!f) return;
    const auto size = static_cast<std::int64_t>(f->payload.size()) + delta;
    f->payload.resize(static_cast<std::size_t>(
        std::clamp<std::int64_t>(size, 0, static_cast<std::int64_t>(kMaxResizedPayload))));
    hand_to_b(*f);
  }

  // What a backend does with a frame that arrived for B.
  void hand_to_b(const Frame& f) {
    if (b_upper_->closed) return;
    try {
      if (f.payload.empty()) {
        b_->on_message(*b_wire_, f.header, Placement{});
      } else {
        const Placement p = b_->place(*b_wire_, f.header, f.payload.size());
        require(p.dest.size == f.payload.size() && p.dest.data != nullptr,
                "a placement of another size than the payload");
        std::memcpy(p.dest.data, f.payload.data(), f.payload.size());
        b_->on_message(*b_wire_, f.header, p);
      }
    } catch (const Error&) {
      b_wire_->close();  // a backend closes the connection whose place() threw
    }
    if (!b_wire_->is_open()) b_->on_closed(*b_wire_, Status(ErrorCode::kConnectionClosed, "x"));
  }

  // B hands its receiver A's messages from the first on, each whole and once (those delivered
  // since the last check; the ones before it were checked then).
  void check() {
    const auto& got = b_upper_->received;
    require(got.size() <= sent_.size(), "more messages delivered than were sent");
    for (; checked_ < got.size(); ++checked_)
      require(got[checked_] == sent_[checked_],
              "a delivered message is not the one sent in its place");
  }

  std::shared_ptr<Upper> a_upper_ = std::make_shared<Upper>();
  std::shared_ptr<Upper> b_upper_ = std::make_shared<Upper>();
  std::shared_ptr<WireEnd> a_wire_ = std::make_shared<WireEnd>(1);
  std::shared_ptr<WireEnd> b_wire_ = std::make_shared<WireEnd>(2);
  std::shared_ptr<SecureContext> a_, b_;
  std::vector<Frame> sent_;      // A's messages, in order
  std::deque<Frame> in_flight_;  // sealed frames on the wire to B
  std::vector<Frame> history_;   // frames taken off the wire, for REPLAY
  int large_sends_ = 0;
  std::size_t checked_ = 0;  // B's deliveries check() has compared
};

}  // namespace

std::string run_one(std::span<const std::byte> input) {
  Link link;
  Script script(input);
  link.run(script);
  return link.outcome();
}

}  // namespace psrt::transport::secure::fuzz

// libFuzzer only: every dropped message would log a warning, thousands a second.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  psrt::log::set_level(psrt::log::Level::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psrt::transport::secure::fuzz::run_one({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
