// The worker's part of server replicas (psrun --replicas 2): slice operations go to the server
// that serves the slice now, and stay in a per-slice log until nothing can ask for them again,
// so that when a server is lost and the scheduler names the backup that took over its slices
// (ROUTE), the worker re-sends them there in the order it first sent them. A push carries its
// number on the slice (header round): the new server acknowledges one it already holds without
// applying it again, so no update is lost or doubled.
#include <fmt/core.h>

#include <algorithm>

#include "base/log.h"
#include "ps/worker_impl.h"

namespace psrt {

using ps::Header;
using ps::MsgType;

namespace {
// Acknowledged pushes a slice keeps for a re-send when no pull follows them (a pull answered
// after a push means the push is applied on two servers).
constexpr std::size_t kMaxKeptPushes = 256;
// Refusals with reroute() one operation waits out (each followed by a ROUTE and a re-send):
// more fail it with the last refusal, which names both servers.
constexpr std::uint32_t kMaxReroutes = 3;
}  // namespace

void Worker::Impl::send_replicated(const ps::SliceRecord& s, Header h, ConstBuffer src,
                                   MutableBuffer dest,
                                   const std::shared_ptr<detail::HandleState>& st) {
  std::shared_ptr<std::vector<std::byte>> payload;
  if (src.size > 0) {
    const auto* p = static_cast<const std::byte*>(src.data);
    payload = std::make_shared<std::vector<std::byte>>(p, p + src.size);
  }
  const Key key = h.key;
  const std::uint32_t index = s.index;
  const std::string what = fmt::format("{} of key {} slice {}", ps::to_string(h.type), key, index);
  std::unique_lock lock(route_mu_);
  SliceLog& log = logs_[{key, index}];
  log.shard = s.server;
  Sent sent;
  if (h.type == MsgType::kPush || h.type == MsgType::kPushPull) sent.seq = h.round = ++log.pushes;
  sent.upto = log.pushes;
  sent.to = owner_[s.server];
  auto& server = servers_[sent.to];
  auto id_cell = std::make_shared<std::uint64_t>(0);
  const auto id = requests_.add(
      *server, what,
      [this, st, key, index, id_cell](const Status& status, const Header& reply,
                                      std::span<const std::byte>) {
        on_replicated_reply(key, index, *id_cell, status);
        if (status.ok()) st->note_version(reply);
        st->complete_part(status);
      },
      dest);
  *id_cell = id;
  h.request_id = id;
  sent.id = id;
  sent.header = h;
  sent.payload = payload;
  log.sent.push_back(sent);
  // A send that fails (its server was lost) is not the operation's failure: ROUTE re-sends it.
  auto on_sent = [st](const Status&) { st->sent_part(); };
  if (payload) {
    ConstBuffer b{payload->data(), payload->size()};
    server->send(h, {&b, 1}, [payload, on_sent](const Status& s) { on_sent(s); });
  } else {
    server->send(h, {}, on_sent);
  }
  // The job may have stopped since check_open(): SHUTDOWN's fail_all ran before this request was
  // added and its server is gone, so no ROUTE would ever re-send it. Fail it now, not at its
  // timeout (ended_ is set before that fail_all; the replies' callbacks take route_mu_).
  lock.unlock();
  fail_if_ended();
}

void Worker::Impl::on_replicated_reply(Key key, std::uint32_t index, std::uint64_t id,
                                       const Status& status) {
  std::lock_guard lock(route_mu_);
  auto it = logs_.find({key, index});
  if (it == logs_.end()) return;
  auto& sent = it->second.sent;
  auto self = std::find_if(sent.begin(), sent.end(), [id](const Sent& s) { return s.id == id; });
  if (self == sent.end()) return;
  const MsgType type = self->header.type;
  if (!status.ok() || type == MsgType::kInit || type == MsgType::kVersion) {
    sent.erase(self);
    return;
  }
  if (type == MsgType::kPush) {
    self->id = 0;  // kept until a pull shows it applied
    std::size_t kept = 0;
    for (const auto& s : sent)
      kept += s.id == 0 ? 1 : 0;
    if (kept > kMaxKeptPushes) {
      auto oldest = std::find_if(sent.begin(), sent.end(), [](const Sent& s) { return s.id == 0; });
      sent.erase(oldest);
    }
    return;
  }
  // PULL, PUSH_PULL: answered once this worker's pushes sent before it were applied, and with
  // replicas a version is answered only once its backup holds it.
  const std::uint64_t upto = self->upto;
  sent.erase(self);
  std::erase_if(sent, [upto](const Sent& s) { return s.id == 0 && s.seq != 0 && s.seq <= upto; });
}

bool Worker::Impl::keep_for_route(const ps::Peer& peer, const Header& refusal,
                                  std::span<const std::byte> text) {
  std::lock_guard lock(route_mu_);
  for (auto& [slice, log] : logs_) {
    for (Sent& s : log.sent) {
      if (s.id != refusal.request_id) continue;
      // Only the server it was sent to refuses it; past the cap the refusal fails it.
      if (servers_[s.to].get() != &peer || s.reroutes >= kMaxReroutes) return false;
      ++s.reroutes;
      const std::uint32_t owner = owner_[log.shard];
      const std::string what = fmt::format("{} of key {} slice {}", ps::to_string(s.header.type),
                                           slice.first, slice.second);
      const std::string_view why(reinterpret_cast<const char*>(text.data()), text.size());
      if (owner != s.to) {  // the ROUTE was applied before the refusal arrived: at once
        if (requests_.rebind(s.id, *servers_[owner])) {
          PSRT_LOG_INFO("{} re-sent to server {} (refusal {} of at most {}): {}", what, owner,
                        s.reroutes, kMaxReroutes, why);
          resend_locked(s, owner);
        }
        return true;
      }
      PSRT_LOG_INFO(
          "{} waits for the scheduler's ROUTE of server {} (refusal {} of at most {}): {}", what,
          owner, s.reroutes, kMaxReroutes, why);
      return true;
    }
  }
  return false;
}

void Worker::Impl::on_route(const Header& h) {
  const std::uint32_t lost = h.lost_server(), to = h.promote_to();
  if (lost >= servers_.size() || to >= servers_.size()) {
    PSRT_LOG_ERROR("ROUTE from server {} to server {}: the job has {} servers", lost, to,
                   servers_.size());
    return;
  }
  {
    std::lock_guard lock(route_mu_);
    if (closed_servers_.count(lost)) return reroute_locked(lost, to);
    waiting_routes_[lost] = to;
  }
  // Declared lost while its connection here is open (silent past the timeout): closed now, and
  // the ROUTE goes ahead once it is (server_closed).
  servers_[lost]->close();
}

void Worker::Impl::server_closed(std::uint32_t rank) {
  std::lock_guard lock(route_mu_);
  closed_servers_.insert(rank);
  auto it = waiting_routes_.find(rank);
  if (it == waiting_routes_.end()) return;
  const std::uint32_t to = it->second;
  waiting_routes_.erase(it);
  reroute_locked(rank, to);
}

void Worker::Impl::reroute_locked(std::uint32_t lost, std::uint32_t to) {
  std::size_t resent = 0;
  std::vector<bool> moved(servers_.size(), false);
  for (std::uint32_t i = 0; i < owner_.size(); ++i)
    if (owner_[i] == lost) {
      owner_[i] = to;
      moved[i] = true;
    }
  for (auto& [id, log] : logs_) {
    if (!moved[log.shard]) continue;
    for (auto& s : log.sent) {
      if (s.id != 0 && !requests_.rebind(s.id, *servers_[to])) continue;  // answered meanwhile
      resend_locked(s, to);
      ++resent;
    }
  }
  PSRT_LOG_INFO("server {}'s slices are served by server {} now: {} operations re-sent there", lost,
                to, resent);
}

void Worker::Impl::resend_locked(Sent& s, std::uint32_t to) {
  Header again = s.header;
  // An acknowledged push: its new acknowledgement is not awaited.
  if (s.id == 0) again.request_id = 0;
  s.to = to;
  auto& server = servers_[to];
  if (s.payload) {
    ConstBuffer b{s.payload->data(), s.payload->size()};
    server->send(again, {&b, 1}, [p = s.payload](const Status&) {});
  } else {
    server->send(again);
  }
}

}  // namespace psrt
