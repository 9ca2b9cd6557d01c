// The scheduler's answer to PLACEMENT (issue 30): a server asks, at the first INIT of a slice it
// does not hold, whether the shard map places that slice on it. Only the scheduler knows: which
// server holds a slice depends on the keys placed before it (ps/shard_map.h), and with replicas
// on the servers lost since (owner_). A worker that INITs a key it never LOCATEd, or a slice on a
// server the map does not name (a second, divergent copy), is refused by the server.
#include <fmt/core.h>

#include "base/log.h"
#include "ps/scheduler.h"

namespace psrt::ps {

using Lock = std::unique_lock<std::mutex>;

std::uint32_t Scheduler::placed_server_locked(const Header& h) const {
  const std::vector<SliceRecord>* slices = shards_.find(h.key);
  if (!slices || shards_.total(h.key) != h.total) return kAnyRank;
  for (const SliceRecord& s : *slices)
    if (s.index == h.slice())
      return s.offset == h.offset && s.count == h.count ? s.server : kAnyRank;
  return kAnyRank;
}

void Scheduler::on_placement(Peer& peer, const Header& h) {
  Lock lock(mu_);
  if (peer.role() != Role::kServer || peer.rank() >= servers_.size() ||
      servers_[peer.rank()].get() != &peer)
    return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                           fmt::format("PLACEMENT from {}, which is not a registered server of "
                                       "the job",
                                       peer.name()),
                           true);
  if (drop_placement_reply && drop_placement_reply(peer.rank(), h)) return;
  Header r;
  r.type = MsgType::kPlacementReply;
  r.request_id = h.request_id;
  r.key = h.key;
  const std::uint32_t placed = placed_server_locked(h);
  r.set_served_by(placed == kAnyRank ? kAnyRank : owner_[placed]);
  r.set_asking_server(peer.rank());
  r.set_placed_on(placed);
  peer.send(r);
}

}  // namespace psrt::ps
