// Outstanding requests of one process, by request id: what to do with the reply, where a data
// reply's payload lands, and which peer must answer (so that losing it fails exactly its
// requests). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/session/endpoint.h"

namespace psrt::ps {
inline namespace session {

struct Reply {
  Header header;
  std::vector<std::byte> payload;
};

class Requests {
 public:
  using Done = std::function<void(const Status&, const Header&, std::span<const std::byte>)>;

  // Registers a request to `peer` and returns its id. `dest` is where a data reply lands.
  // `what` describes it for errors ("PULL of key 7 slice 2").
  std::uint64_t add(const Peer& peer, std::string what, Done done, MutableBuffer dest = {});
  // The destination of a data reply from `from`, checked against its size and against the peer
  // asked; throws psrt::Error otherwise.
  MutableBuffer dest(const Peer& from, std::uint64_t id, std::size_t size);
  // Completes the request a reply answers (ERROR replies become the status). Returns false for
  // an unknown id (a late reply to a request already failed) and for a reply from a peer other
  // than the one asked, which is ignored (logged at a bounded rate): the request goes on.
  bool complete(const Peer& from, const Header& h, std::span<const std::byte> payload);
  // Fails every request waiting on `peer`, naming it, the request and `why`.
  void fail_peer(const Peer& peer, const Status& why);
  // Moves a request to `peer` (server replicas: its server was lost and another answers it
  // now); false when it already completed.
  bool rebind(std::uint64_t id, const Peer& peer);
  // Fails one request (e.g. its send failed); false when it already completed.
  bool fail(std::uint64_t id, const Status& why);
  std::size_t size();
  void fail_all(const Status& why);

  // Sends a request and blocks for its reply, up to `timeout`. Throws psrt::Error; a send that
  // fails (e.g. on a closed connection) fails the call at once with that error.
  Reply call(Peer& peer, Header h, std::vector<std::byte> payload, std::string what,
             std::chrono::milliseconds timeout);

 private:
  struct Entry {
    std::uint64_t peer_id;
    std::string peer_name;
    std::string what;
    Done done;
    MutableBuffer dest;
  };
  std::optional<Entry> take(std::uint64_t id);

  std::mutex mu_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Entry> pending_;
};

}  // namespace session
}  // namespace psrt::ps
