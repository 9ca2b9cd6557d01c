// A worker made by hand from a raw ps::Endpoint (no psrt::Worker), as the attack scenarios need:
// connected to the scheduler, registered, holding the credential the scheduler gave it.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "transport/transport.h"

namespace psrt::test {

// A worker-side handler whose replies (and failures) go to `requests`.
class RequestsHandler : public ps::Handler {
 public:
  MutableBuffer place(ps::Peer& peer, const ps::Header& h, std::size_t size,
                      std::uint64_t) override {
    return requests.dest(peer, h.request_id, size);
  }
  void on_message(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload,
                  const transport::Placement&) override {
    requests.complete(peer, h, payload);
  }
  void on_peer_closed(ps::Peer& peer, const Status& why) override { requests.fail_peer(peer, why); }
  ps::Requests requests;
};

// What psrun tells a worker: PSRT_TRANSPORT, PSRT_SECRET, PSRT_SCHEDULER.
struct JobEnv {
  std::string backend, secret, scheduler;
};
JobEnv job_env();

// Transport options of a process holding `secret`: its UCX bootstrap hello proves it
// (transport/ucx/hello.h), as a psrt role's does.
inline transport::Options job_transport_options(const std::string& secret) {
  transport::Options o;
  o.bootstrap_secret = secret;
  return o;
}

struct RawWorker {
  std::shared_ptr<ps::Endpoint> endpoint;
  std::unique_ptr<transport::Transport> transport;
  std::shared_ptr<ps::Peer> scheduler;
};

// A worker-role endpoint holding `secret`, its events to `handler`, on a `backend` transport,
// connected to the scheduler at `address` asking for rank `rank` (handshake bounded to 10 s).
RawWorker connect_raw_worker(const std::string& backend, const std::string& secret,
                             ps::Handler& handler, const std::string& address,
                             std::uint32_t rank = 0);

// REGISTERs `w` as a worker (bounded to 60 s) and sets on its endpoint the membership credential
// of the reply, which it then proves to every server. The reply: assigned_rank(), server list.
ps::Reply register_raw_worker(RawWorker& w, ps::Requests& requests);

// "OK <what>" on stdout when `ok`, else "FAIL <label>: <what>" on stderr and exit 1.
void expect_or_exit(bool ok, const std::string& what, const char* label, bool flush = false);

inline bool has(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace psrt::test
