// The transport interface: moves messages between processes. Knows nothing of keys, tensors or
// roles. Backends ("tcp", "ucx") sit behind create_transport() in factory.h.
//
// A message is a small header (at most kMaxHeaderBytes, opaque to the transport) plus an optional
// payload. The sender gives the payload as a scatter-gather list that is sent from in place. The
// receiver is handed the header first, chooses where the payload goes (Receiver::place), and the
// payload then lands directly in that buffer; Receiver::on_message says the message is complete.
//
// Threads: every backend runs one progress thread. While the transport runs, all Receiver
// callbacks and all SendDone callbacks run on it, one at a time, and never inside the send() or
// close() that caused them (not even a send that fails at once, nor one called from a callback:
// its completion runs after that callback returned); they must not block. send() and close() may
// be called from any thread, including from inside a callback. Once shutdown() has stopped the
// progress thread there is no thread left to run them, so no completion is lost: shutdown() runs
// the pending ones on its own thread, and a later send() completes with an error on the calling
// thread before it returns. A caller whose completions take a lock it holds while sending must
// therefore not send once shutdown() began (ps::Scheduler shuts its transport down only after
// its own threads stopped, holding no lock). tests/transport/conformance_test.cc checks both.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "psrt/buffer.h"
#include "psrt/error.h"

namespace psrt::transport {

inline constexpr std::size_t kMaxHeaderBytes = 256;

struct Options {
  // A dead or unreachable peer is reported on its connection within this time.
  std::chrono::milliseconds peer_timeout{10'000};
  // connect() gives up after this long.
  std::chrono::milliseconds connect_timeout{10'000};
  // An accepted connection's bootstrap exchange (UCX: the worker-address hello) must finish
  // within this; the PS handshake after it has its own deadline (ps::Admission).
  std::chrono::milliseconds accept_timeout{10'000};
  // Frames announcing a larger payload are refused and their connection is closed.
  std::size_t max_payload_bytes = std::size_t{1} << 31;
  // The progress thread busy-polls this long after its last event before it sleeps.
  std::chrono::microseconds spin{100};
  // Non-empty: the secure mode (transport/secure/): each connection proves this job secret in a
  // handshake and every message is sealed with AES-256-GCM under keys of that connection.
  std::string secure_secret;
  // Non-empty: the UCX backend's bootstrap hello proves this secret (HMAC-SHA256 over both ends'
  // nonces, ucx/hello.h), and no endpoint is created from a hello that does not. The PS roles
  // set it to the job secret; the secure mode uses secure_secret when it is empty. The tcp
  // backend creates nothing from unauthenticated bytes and ignores it.
  std::string bootstrap_secret;
};

// Completion of one send. Runs exactly once: on the progress thread while the transport runs, on
// the thread that shuts it down or sends after that (see "Threads" above).
using SendDone = std::function<void(const Status&)>;

class Connection {
 public:
  virtual ~Connection() = default;

  // Queues one message. Thread-safe. The header is copied before send() returns; the payload
  // buffers are read in place and must stay valid and unchanged until `done` runs. Messages on
  // one connection reach the receiver's place()/on_message() in the order they were sent.
  // A send on a closed connection completes with kConnectionClosed.
  virtual void send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
                    SendDone done) = 0;

  // Closes the connection. Thread-safe and idempotent; returns at once. Pending sends complete
  // with kConnectionClosed and the receiver's on_closed() runs once.
  virtual void close() = 0;

  // "host:port" of the peer, for messages.
  virtual const std::string& peer() const = 0;
  // Unique within this Transport.
  virtual std::uint64_t id() const = 0;
  virtual bool is_open() const = 0;
};

// Where the payload of one incoming message goes.
struct Placement {
  MutableBuffer dest;        // exactly payload_size bytes
  std::uint64_t cookie = 0;  // handed back in on_message, for the receiver's own use
};

// The receiving side of every connection of one Transport. Callbacks run on the progress thread.
// The header span is valid only during the call.
class Receiver {
 public:
  virtual ~Receiver() = default;
  // A connection was accepted by a listener or established by connect().
  virtual void on_connected(const std::shared_ptr<Connection>& /*conn*/) {}
  // A message with a payload arrived: return the buffer it should land in. Throwing psrt::Error
  // (or returning a buffer of the wrong size or an unsupported memory type) closes this
  // connection with that reason.
  virtual Placement place(Connection& conn, std::span<const std::byte> header,
                          std::size_t payload_size) = 0;
  // A whole message is here; the payload (if any) is in placement.dest.
  virtual void on_message(Connection& conn, std::span<const std::byte> header,
                          const Placement& placement) = 0;
  // The connection is closed: locally, by the peer, or because of an error (`why`).
  // A placement handed out for a message that did not complete is no longer written to.
  virtual void on_closed(Connection& conn, const Status& why) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;

  // Starts accepting connections on "host:port" (port 0 picks a free one). Returns the address
  // peers should connect to. Blocking; throws psrt::Error. May be called several times.
  virtual std::string listen(const std::string& address) = 0;

  // Connects to a listener at "host:port". Blocking, bounded by Options::connect_timeout;
  // throws psrt::Error naming the address and the cause.
  virtual std::shared_ptr<Connection> connect(const std::string& address) = 0;

  // Whether payloads in this memory type can be sent from and received into.
  virtual bool supports(MemoryType type) const = 0;

  // Registers memory that will be sent from or received into many times (UCX: ucp_mem_map;
  // TCP: nothing to do). Sends and receives touching a registered range use the registration.
  // Thread-safe. Registering a range already covered is a no-op.
  virtual void register_memory(MutableBuffer region) = 0;
  virtual void unregister_memory(const void* base) = 0;
  // Whether [data, data+size) lies inside one registered region.
  virtual bool is_registered(const void* data, std::size_t size) const = 0;

  // Closes every connection and listener, completes pending sends with kCancelled and joins the
  // progress thread. Bounded in time; idempotent; also run by the destructor. Sends a live peer
  // may still be reading from the caller's buffers (UCX's rendezvous) are given up to 2 s to
  // finish first, so that no buffer is handed back while the peer reads it.
  virtual void shutdown() = 0;

  // True when called from this transport's progress thread.
  virtual bool on_progress_thread() const = 0;

  // Messages dropped so far without closing their connection because they failed
  // authentication or were replays (the secure mode: forged or replayed frames; 0 elsewhere).
  // Thread-safe. Exported as psrt_secure_dropped_messages_total (docs/monitoring.md).
  virtual std::uint64_t dropped_messages() const { return 0; }
};

}  // namespace psrt::transport
