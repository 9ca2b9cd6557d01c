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

void Scheduler::configure_replicas_locked(std::uint32_t lost, std::uint32_t promote_to,
                                          const std::function<void()>& then) {
  auto remaining = std::make_shared<std::size_t>(live_servers_.size());
  auto on_ack = [this, remaining, then](const Status& acked, const Header&,
                                        std::span<const std::byte>) {
    Lock lock(mu_);
    // A server that cannot take its part holds slices nobody else has, or has no backup: the
    // job cannot promise what --replicas 2 does any more.
    if (!acked.ok() && !finished_) {
      auto msg = fmt::format("a replica change failed: {}; stopping the job", acked.message());
      PSRT_LOG_ERROR("{}", msg);
      finish_locked(Status(acked.code(), msg));
    }
    if (--*remaining > 0) return;
    if (!finished_) then();
  };
  for (const std::uint32_t rank : live_servers_) {
    const std::uint32_t backup = next_live_server_locked(rank);
    std::vector<std::string> lines;
    if (backup != kAnyRank) lines.push_back(server_addresses_[backup]);
    Header m;
    m.type = MsgType::kReplicaSet;
    m.set_lost_server(lost);
    m.set_promote_to(promote_to);
    m.round = backup;
    m.request_id = requests_.add(*servers_[rank], "REPLICA_SET", on_ack);
    const auto id = m.request_id;
    servers_[rank]->send_bytes(m, encode_lines(lines), [this, id](const Status& s) {
      if (!s.ok()) requests_.fail(id, s);
    });
  }
}

bool Scheduler::lose_server_locked(std::uint32_t rank, const std::string& why) {
  if (config_.replicas < 2 || !rendezvous_done_ || !live_servers_.count(rank)) return false;
  const std::uint32_t backup = next_live_server_locked(rank);
  if (backup == kAnyRank) return false;
  live_servers_.erase(rank);
  for (auto& o : owner_)
    if (o == rank) o = backup;
  PSRT_LOG_WARN(
      "server {} lost: {}; server {} takes over its slices from their replicas ({} "
      "servers left)",
      rank, why, backup, live_servers_.size());
  configure_replicas_locked(rank, backup, [this, rank, backup] {
    for (auto& [r, w] : workers_) {
      Header route;
      route.type = MsgType::kRoute;
      route.set_lost_server(rank);
      route.set_promote_to(backup);
      w->send(route);
    }
    PSRT_LOG_INFO("server {}'s slices are served by server {}; the workers were told", rank,
                  backup);
  });
  return true;
}

}  // namespace psrt::ps
