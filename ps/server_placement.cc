// The server's part of placement (issue 30): an INIT of a slice this server does not hold waits
// for the scheduler to say whether the shard map places that slice here (PLACEMENT), and is
// stored only if it does. Which server holds a slice is not a function of the slice (it depends
// on the keys placed before it and, with replicas, on the servers lost since), so the server
// asks; a slice it holds already was placed here when it was stored, so later INITs of it (every
// worker inits every key) ask nothing.
#include <fmt/core.h>

#include "base/log.h"
#include "ps/server.h"

namespace psrt::ps {
namespace {

// Sends ERROR(code, reroute) with `text` answering `init`; returns its header.
Header refuse_init(Peer& peer, const Header& init, ErrorCode code, bool reroute,
                   const std::string& text) {
  Header e;
  e.type = MsgType::kError;
  e.request_id = init.request_id;
  e.set_error_code(code);
  e.set_reroute(reroute);
  auto b = as_bytes(text);
  peer.send_bytes(e, {b.begin(), b.end()});
  return e;
}

}  // namespace

void Server::remember_scheduler(Peer& scheduler) {
  std::lock_guard lock(placements_.mu);
  placements_.scheduler = scheduler.weak_from_this();
  placements_.lost = false;
}

void Server::init_if_placed(Peer& peer, const Header& h, InFlight in) {
  if (find(h.key, h.slice())) return on_init(peer, h, in);
  const SliceAsked slice{h.key, h.slice(), h.offset, h.count, h.total};
  std::shared_ptr<Peer> scheduler;
  bool lost = false;
  Header ask;
  {
    std::lock_guard lock(placements_.mu);
    lost = placements_.lost;
    if (!lost) scheduler = placements_.scheduler.lock();
    if (scheduler) {
      auto& parked = placements_.waiting[slice];
      parked.push_back({peer.shared_from_this(), h, std::move(in)});
      if (parked.size() > 1) return;  // asked already: the answer serves it too
      ask.request_id = placements_.next_id++;
      placements_.asked[ask.request_id] = slice;
    }
  }
  if (lost)
    return refuse_unconfirmed_init(peer, h, ErrorCode::kInvalidArgument,
                                   "this server lost the scheduler, which alone confirms a "
                                   "slice's placement",
                                   true);
  if (!scheduler)
    return refuse_unconfirmed_init(peer, h, ErrorCode::kInvalidArgument,
                                   "this server has no member list from the scheduler yet, so no "
                                   "worker may store a slice",
                                   false);
  ask.type = MsgType::kPlacement;
  ask.key = h.key;
  ask.set_slice(h.slice());
  ask.offset = h.offset;
  ask.count = h.count;
  ask.total = h.total;
  scheduler->send(ask);
}

void Server::on_placement_reply(const Header& h) {
  std::vector<ParkedInit> parked;
  {
    std::lock_guard lock(placements_.mu);
    auto a = placements_.asked.find(h.request_id);
    if (a == placements_.asked.end()) return;  // answered already
    auto w = placements_.waiting.find(a->second);
    if (w != placements_.waiting.end()) {
      parked = std::move(w->second);
      placements_.waiting.erase(w);
    }
    placements_.asked.erase(a);
  }
  for (auto& p : parked) {
    const Header& init = p.h;
    if (h.served_by() == h.asking_server()) {
      on_init(*p.peer, init, p.in);
    } else if (h.served_by() == kAnyRank) {
      p.peer->send_error(
          init.request_id, ErrorCode::kInvalidArgument,
          fmt::format("INIT of key {} slice {} as [{}, +{}) of {}: the shard map has no such slice "
                      "(the key was never located, or is cut otherwise); LOCATE the key and init "
                      "the slices it returns",
                      init.key, init.slice(), init.offset, init.count, init.total),
          false);
    } else if (h.placed_on() == h.asking_server()) {
      refuse_moved_init(*p.peer, init, h.asking_server(), h.served_by());
    } else {
      p.peer->send_error(
          init.request_id, ErrorCode::kInvalidArgument,
          fmt::format("INIT of key {} slice {} on server {}, but the shard map places that slice "
                      "on server {}: init each slice on the server LOCATE names",
                      init.key, init.slice(), h.asking_server(), h.served_by()),
          false);
    }
  }
  if (after_placement) after_placement(h);
}

void Server::refuse_moved_init(Peer& peer, const Header& init, std::uint32_t self,
                               std::uint32_t now) {
  // The map placed the slice here, but the scheduler declared this server lost (its process
  // still runs) and `now` took over its slices: the worker's request was in flight to a lost
  // server, so it re-sends it where the ROUTE of this server points (reroute()).
  refuse_init(
      peer, init, ErrorCode::kInvalidArgument, /*reroute=*/true,
      fmt::format(
          "INIT of key {} slice {} on server {}, but the shard map places that slice on server "
          "{}: the scheduler declared server {} lost and server {} serves its slices now; init it "
          "there (a worker re-sends it once the scheduler's ROUTE names server {})",
          init.key, init.slice(), self, now, self, now, now));
}

bool Server::on_placement_error(const Header& h, std::span<const std::byte> payload) {
  std::vector<ParkedInit> parked;
  {
    std::lock_guard lock(placements_.mu);
    auto a = placements_.asked.find(h.request_id);
    if (a == placements_.asked.end()) return false;
    if (auto w = placements_.waiting.find(a->second); w != placements_.waiting.end()) {
      parked = std::move(w->second);
      placements_.waiting.erase(w);
    }
    placements_.asked.erase(a);
  }
  const std::string why(reinterpret_cast<const char*>(payload.data()), payload.size());
  PSRT_LOG_ERROR("the scheduler refused this server's PLACEMENT: {}", why);
  for (auto& p : parked)
    p.peer->send_error(p.h.request_id, h.error_code(),
                       fmt::format("INIT of key {} slice {}: the scheduler did not confirm its "
                                   "placement: {}",
                                   p.h.key, p.h.slice(), why),
                       false);
  return true;
}

void Server::placement_peer_closed(const Peer& peer) {
  if (peer.role() != Role::kScheduler) return;
  std::map<SliceAsked, std::vector<ParkedInit>> waiting;
  {
    std::lock_guard lock(placements_.mu);
    waiting.swap(placements_.waiting);
    placements_.asked.clear();
    placements_.lost = true;
  }
  for (auto& [slice, parked] : waiting)
    for (auto& p : parked)
      refuse_unconfirmed_init(*p.peer, p.h, ErrorCode::kPeerFailed,
                              "the scheduler was lost before it confirmed the slice's placement",
                              true);
}

void Server::refuse_unconfirmed_init(Peer& peer, const Header& init, ErrorCode code,
                                     const std::string& why, bool lost) {
  // The scheduler closes the connection of a server it declares lost (a missed heartbeat) while
  // that server's process may still run and answer: an INIT in flight to it then is in flight
  // to a lost server, re-sent where the ROUTE points like every other (ps/worker_replica.cc).
  // This server cannot tell that loss from the scheduler's end, which stops the job anyway.
  const bool reroute = lost && link_;
  const Header e = refuse_init(
      peer, init, code, reroute,
      fmt::format("INIT of key {} slice {}: {}{}", init.key, init.slice(), why,
                  reroute ? " (a worker re-sends it once the scheduler's ROUTE names the server "
                            "serving this server's slices)"
                          : ""));
  if (after_init_refused) after_init_refused(init, e);
}

}  // namespace psrt::ps
