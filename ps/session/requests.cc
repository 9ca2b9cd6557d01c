#include "ps/session/requests.h"

#include <fmt/core.h>

#include <future>

#include "base/log.h"

namespace psrt::ps {
inline namespace session {

std::uint64_t Requests::add(const Peer& peer, std::string what, Done done, MutableBuffer dest) {
  std::lock_guard lock(mu_);
  std::uint64_t id = next_id_++;
  pending_.emplace(id, Entry{peer.id(), peer.name(), std::move(what), std::move(done), dest});
  return id;
}

MutableBuffer Requests::dest(const Peer& from, std::uint64_t id, std::size_t size) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.peer_id != from.id())
    throw Error(
        ErrorCode::kProtocol,
        fmt::format("a data reply from {} to request {}, which it was not asked", from.name(), id));
  if (it->second.dest.size != size)
    throw Error(ErrorCode::kProtocol,
                fmt::format("{} answered {} with {} bytes, expected {}", it->second.peer_name,
                            it->second.what, size, it->second.dest.size));
  return it->second.dest;
}

std::optional<Requests::Entry> Requests::take(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  pending_.erase(it);
  return e;
}

bool Requests::complete(const Peer& from, const Header& h, std::span<const std::byte> payload) {
  std::optional<Entry> e;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(h.request_id);
    if (it == pending_.end()) return false;
    if (it->second.peer_id != from.id()) {
      // Only the peer asked may answer: anyone else guessing request ids (a peer that never
      // registered, another server) would otherwise fail or complete requests of the job.
      PSRT_LOG_WARN_LIMITED("{} answered request {} ({}), which was asked of {}: ignored",
                            from.name(), h.request_id, it->second.what, it->second.peer_name);
      return false;
    }
    e = std::move(it->second);
    pending_.erase(it);
  }
  if (h.type == MsgType::kError) {
    std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
    e->done(Status(h.error_code(), fmt::format("{} refused {}: {}", e->peer_name, e->what, text)),
            h, {});
    return true;
  }
  e->done(Status(), h, payload);
  return true;
}

bool Requests::rebind(std::uint64_t id, const Peer& peer) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  it->second.peer_id = peer.id();
  it->second.peer_name = peer.name();
  return true;
}

void Requests::fail_peer(const Peer& peer, const Status& why) {
  std::vector<Entry> failed;
  {
    std::lock_guard lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.peer_id == peer.id()) {
        failed.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& e : failed)
    e.done(Status(why.ok() ? ErrorCode::kConnectionClosed : why.code(),
                  fmt::format("{} closed the connection during {}: {}", e.peer_name, e.what,
                              why.message())),
           Header{}, {});
}

bool Requests::fail(std::uint64_t id, const Status& why) {
  auto e = take(id);
  if (!e) return false;
  e->done(Status(why.code(), fmt::format("{} to {}: {}", e->what, e->peer_name, why.message())),
          Header{}, {});
  return true;
}

std::size_t Requests::size() {
  std::lock_guard lock(mu_);
  return pending_.size();
}

void Requests::fail_all(const Status& why) {
  std::unordered_map<std::uint64_t, Entry> all;
  {
    std::lock_guard lock(mu_);
    all.swap(pending_);
  }
  for (auto& [id, e] : all)
    e.done(Status(why.code(), fmt::format("{} to {}: {}", e.what, e.peer_name, why.message())),
           Header{}, {});
}

Reply Requests::call(Peer& peer, Header h, std::vector<std::byte> payload, std::string what,
                     std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::pair<Status, Reply>>>();
  auto future = promise->get_future();
  h.request_id = add(peer, what,
                     [promise](const Status& s, const Header& rh, std::span<const std::byte> body) {
                       promise->set_value({s, Reply{rh, {body.begin(), body.end()}}});
                     });
  // A send that fails (a dead connection) fails the call at once instead of at its timeout.
  const auto id = h.request_id;
  auto on_sent = [this, id](const Status& s) {
    if (!s.ok()) fail(id, s);
  };
  if (payload.empty()) {
    peer.send(h, {}, on_sent);
  } else {
    peer.send_bytes(h, std::move(payload), on_sent);
  }
  if (future.wait_for(timeout) != std::future_status::ready) {
    if (take(h.request_id))
      throw Error(ErrorCode::kTimeout, fmt::format("{} got no answer to {} within {} ms",
                                                   peer.name(), what, timeout.count()));
  }
  auto [status, reply] = future.get();
  status.throw_if_error();
  return reply;
}

}  // namespace session
}  // namespace psrt::ps
