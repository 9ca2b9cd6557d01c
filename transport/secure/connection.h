// One connection of the secure mode: the backend's connection plus its handshake state, its two
// keys and its two sequence numbers (see handshake.h for the layout).
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "transport/secure/context.h"
#include "transport/secure/crypto.h"
#include "transport/secure/handshake.h"
#include "transport/transport.h"

namespace psrt::transport::secure {

class SecureConnection final : public Connection,
                               public std::enable_shared_from_this<SecureConnection> {
 public:
  SecureConnection(std::shared_ptr<SecureContext> ctx, std::shared_ptr<Connection> inner);
  ~SecureConnection() override;

  // Seals the header and the payload (into a buffer this send owns) and hands them to the
  // backend. Thread-safe; sealing runs in the calling thread and the context's crypt pool.
  void send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
            SendDone done) override;
  void close() override { inner_->close(); }
  const std::string& peer() const override { return inner_->peer(); }
  std::uint64_t id() const override { return inner_->id(); }
  bool is_open() const override { return inner_->is_open(); }

  // The backend's callbacks for this connection (progress thread).
  void start_on_loop();
  Placement place_on_loop(std::span<const std::byte> header, std::size_t payload_size);
  void on_message_on_loop(std::span<const std::byte> header, const Placement& placement);
  void on_closed_on_loop(const Status& why);

  // connect(): waits for the handshake; returns why it failed, or OK.
  Status wait_established(std::chrono::steady_clock::time_point deadline);
  // The timer thread: closes the connection if its handshake has not finished.
  void expire_handshake();

 private:
  enum class State { kHandshake, kOpen, kClosed };
  struct Placed {
    std::uint64_t seq = 0;
    std::array<std::byte, kMaxPlainHeaderBytes> header{};
    std::size_t header_len = 0;
    std::array<Tag, kMaxSegments> tags{};  // of the payload's segments
    Placement placement;
    bool discard = false;  // dropped: the payload lands in `sink` and is never delivered
    CipherBuffer sink;
  };
  // Payloads of dropped messages landing at once on one connection; one more closes it.
  static constexpr int kMaxDiscardsInFlight = 4;

  void handshake_on_loop(std::span<const std::byte> header);
  void send_handshake(HandshakeType type, std::span<const std::byte, 32> body);
  // Checks and decrypts a sealed header into `out` (seq, header, tags). Empty on success, else
  // why.
  std::string open_header_on_loop(std::span<const std::byte> sealed, std::size_t payload_size,
                                  Placed& out);
  // Records `why` as the reason the caller's receiver will be given and closes the connection.
  void fail_on_loop(ErrorCode code, const std::string& why);
  // Same, for place(): returns the error to throw (the backend closes the connection).
  Error refuse_on_loop(ErrorCode code, const std::string& why);
  // A message that failed authentication or was already delivered (a forgery carrying this
  // connection's route, a replay): counted, logged at a bounded rate, never delivered, and the
  // connection goes on. Its payload, if any, lands in a buffer of this layer.
  Placement discard_on_loop(const std::string& why, std::size_t payload_size);
  void note_dropped(const std::string& why);
  // Opens a placed payload in place, its segments in parallel: false if any fails its tag.
  bool open_payload_on_loop(const Placed& p, std::byte* data, std::size_t size);
  void refuse(SendDone done, Status status);

  std::shared_ptr<SecureContext> ctx_;
  std::shared_ptr<Connection> inner_;

  mutable std::mutex state_mutex_;
  std::condition_variable state_cv_;
  State state_ = State::kHandshake;  // guarded by state_mutex_
  Status failure_;                   // guarded by state_mutex_: overrides the backend's reason

  // Progress thread only:
  Nonce my_nonce_{};
  bool have_keys_ = false;
  Mac peer_confirm_{};
  bool announced_ = false;  // the caller's receiver was given on_connected
  bool dead_ = false;       // failed: later callbacks are ignored
  std::array<std::unique_ptr<Aead>, kMaxSegments> open_;  // one per segment; [0] also headers
  std::uint64_t recv_next_ = 0;      // sequence number of the next message to deliver
  std::uint64_t min_place_seq_ = 0;  // placements come in order, after every delivered one
  std::deque<Placed> placed_;        // placed, payload still landing
  int discards_in_flight_ = 0;       // entries of placed_ with `discard`
  std::uint64_t dropped_ = 0;        // messages dropped on this connection
  // The message due next, whose payload failed authentication (a forged copy of its sealed
  // header): the receiver's placement is kept for the real one, which carries the same header.
  std::optional<Placed> orphan_;

  std::mutex send_mutex_;
  std::array<std::unique_ptr<Aead>, kMaxSegments> seal_;  // guarded by send_mutex_; as open_
  std::uint64_t send_seq_ = 0;                            // guarded by send_mutex_
};

}  // namespace psrt::transport::secure
