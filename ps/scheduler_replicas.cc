// The scheduler's part of server replicas (psrun --replicas 2): every live server replicates its
// slices to the next live server in rank order (a ring), and when a server is lost, that next
// server is promoted for its slices, every server is told its backup anew (REPLICA_SET), and
// once all acknowledged the workers are told where the lost server's slices are (ROUTE). The job
// goes on; a worker re-sends what the lost server had not answered (ps/worker_replica.cc).
#include <fmt/core.h>

#include "base/log.h"
#include "ps/scheduler.h"

namespace psrt::ps {

using Lock = std::unique_lock<std::mutex>;

std::uint32_t Scheduler::next_live_server_locked(std::uint32_t rank) const {
  auto it = live_servers_.upper_bound(rank);
  if (it == live_servers_.end()) it = live_servers_.begin();
  return it == live_servers_.end() || *it == rank ? kAnyRank : *it;
}

std::uint32_t Scheduler::primary_of_locked(std::uint32_t rank) const {
  for (const std::uint32_t live : live_servers_)
    if (live != rank && next_live_server_locked(live) == rank) return live;
  return kAnyRank;
}

void Scheduler::configure_replicas_locked(std::uint32_t lost, std::uint32_t promote_to,
                                          const std::function<void()>& then) {
  // A change of the queue (queue_change_locked): it ends once every server answered.
  auto remaining = std::make_shared<std::size_t>(live_servers_.size());
  const std::uint64_t losses = server_losses_;
  for (const std::uint32_t rank : live_servers_) {
    auto on_ack = [this, remaining, then, rank, losses](const Status& acked, const Header&,
                                                        std::span<const std::byte>) {
      Lock lock(mu_);
      if (acked.ok()) {
        // Its new backup holds a copy of every slice it has (as of a loss before this change).
        if (auto u = unsettled_.find(rank); u != unsettled_.end() && u->second.since <= losses)
          unsettled_.erase(u);
      } else if (!finished_ && losses == server_losses_) {
        // A server that cannot take its part holds slices nobody else has, or has no backup:
        // the job cannot promise what --replicas 2 does any more.
        auto msg = fmt::format("a replica change failed: {}; stopping the job", acked.message());
        PSRT_LOG_ERROR("{}", msg);
        finish_locked(Status(acked.code(), msg));
      } else if (!finished_) {
        // A server was lost since this change began (its own or its backup's failure): the
        // change queued for that loss configures every server again.
        PSRT_LOG_INFO("replica change superseded by a later server loss: {}", acked.message());
      }
      if (--*remaining > 0) return;
      if (!finished_) then();
      start_next_change_locked();
    };
    const std::uint32_t backup = next_live_server_locked(rank);
    std::vector<std::string> lines;
    if (backup != kAnyRank) lines.push_back(server_addresses_[backup]);
    Header m;
    m.type = MsgType::kReplicaSet;
    m.set_lost_server(lost);
    m.set_promote_to(promote_to);
    m.round = backup;
    // Who may replicate to this server: the one server whose backup it is, proving its
    // registration's credential (a holder of the secret alone cannot pose as it).
    const std::uint32_t primary = primary_of_locked(rank);
    m.total = primary;
    if (primary != kAnyRank) set_credential(m, server_credentials_[primary]);
    m.request_id = requests_.add(*servers_[rank], "REPLICA_SET", on_ack);
    const auto id = m.request_id;
    servers_[rank]->send_bytes(m, encode_lines(lines), [this, id](const Status& s) {
      if (!s.ok()) requests_.fail(id, s);
    });
  }
}

void Scheduler::send_routes_locked() {
  // Rechecked now, not taken from the loss: a server lost meanwhile is not named, and a chain
  // (P's slices went to Q, then Q's to R) is sent as it ends (P → R, Q → R). Each route once.
  for (std::uint32_t lost = 0; lost < owner_.size(); ++lost) {
    const std::uint32_t to = owner_[lost];
    if (to == lost || to == routed_[lost] || !live_servers_.count(to)) continue;
    const std::uint32_t was = routed_[lost];
    routed_[lost] = to;
    for (auto& [r, w] : workers_) {
      Header route;
      route.type = MsgType::kRoute;
      route.set_lost_server(lost);
      route.set_promote_to(to);
      w->send(route);
    }
    if (was == lost)
      PSRT_LOG_INFO("server {}'s slices are served by server {}; the workers were told", lost, to);
    else
      PSRT_LOG_INFO(
          "server {}'s slices moved on with server {}'s to server {}; the workers were "
          "told",
          lost, was, to);
  }
}

bool Scheduler::lose_server_locked(std::uint32_t rank, const std::string& why) {
  if (config_.replicas < 2 || !rendezvous_done_ || !live_servers_.count(rank)) return false;
  if (auto u = unsettled_.find(rank); u != unsettled_.end()) {
    // Its slices (some, or those it took over) were on it alone: the job cannot go on exact.
    auto msg = fmt::format(
        "server {} lost: {}; it was lost before a copy of its slices reached another server ({}), "
        "so those slices are gone: stopping the job (resume from a checkpoint)",
        rank, why, u->second.why);
    PSRT_LOG_ERROR("{}", msg);
    finish_locked(Status(ErrorCode::kPeerFailed, msg));
    return true;
  }
  const std::uint32_t backup = next_live_server_locked(rank);
  if (backup == kAnyRank) return false;
  const std::uint32_t primary = primary_of_locked(rank);
  live_servers_.erase(rank);
  ++server_losses_;
  for (auto& o : owner_)
    if (o == rank) o = backup;
  unsettled_[backup] = {fmt::format("it took over the slices of server {}", rank), server_losses_};
  if (primary != kAnyRank && primary != backup)
    unsettled_[primary] = {fmt::format("it replicated to server {}", rank), server_losses_};
  PSRT_LOG_WARN(
      "server {} lost: {}; server {} takes over its slices from their replicas ({} "
      "servers left)",
      rank, why, backup, live_servers_.size());
  ++loss_changes_;
  queue_change_locked([this, rank, backup] {
    configure_replicas_locked(rank, backup, [this] {
      if (--loss_changes_ == 0) send_routes_locked();
    });
  });
  return true;
}

bool Scheduler::lose_server_for_test(std::uint32_t rank) {
  Lock lock(mu_);
  return lose_server_locked(rank, "declared lost by a test (its connection stays open)");
}

bool Scheduler::close_server_for_test(std::uint32_t rank) {
  Lock lock(mu_);
  if (rank >= servers_.size() || !servers_[rank]) return false;
  // As monitor() closes a silent peer: the loss is taken once the connection is closed here.
  lost_why_[servers_[rank]->id()] = "its connection was closed by a test (its process runs on)";
  servers_[rank]->close();
  return true;
}

}  // namespace psrt::ps
