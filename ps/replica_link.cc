// A server's replica link (psrun --replicas 2; ps/replica_link.h says how it works).
#include "ps/replica_link.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "base/log.h"
#include "ps/metric_hooks.h"
#include "ps/optimizer_state.h"

namespace psrt::ps {

ReplicaLink::ReplicaLink(std::shared_ptr<Endpoint> endpoint, transport::Transport& t,
                         std::uint32_t self_rank, std::chrono::milliseconds connect_timeout,
                         Owner& owner)
    : endpoint_(std::move(endpoint)),
      transport_(t),
      self_rank_(self_rank),
      connect_timeout_(connect_timeout),
      owner_(owner) {}

ReplicaLink::~ReplicaLink() {
  stop();
}

std::vector<ReplicaCount> ReplicaLink::counts_locked(const Slice& s,
                                                     const std::vector<std::uint32_t>& consumed) {
  std::vector<ReplicaCount> counts;
  for (const auto& [rank, w] : s.workers) {
    const bool in_update = std::find(consumed.begin(), consumed.end(), rank) != consumed.end();
    counts.push_back({rank, w.applied + (in_update ? 1 : 0), w.received - w.queued.size()});
  }
  return counts;
}

void ReplicaLink::replicate(const Slice& s, std::span<const float> weights, std::uint64_t version,
                            std::vector<ReplicaCount> counts, std::function<void()> then) {
  // Copies: the primary goes on with its slice once the backup acknowledged, whatever the
  // transport still does with these buffers (a lost backup's send may complete late).
  auto state = std::make_shared<Replication>();
  state->key = s.key;
  state->index = s.index;
  state->offset = s.offset;
  state->count = s.count;
  state->total = s.total;
  state->version = version;
  state->parts.emplace_back(weights.begin(), weights.end());
  // The optimizer state (ps/optimizer_state.h): SGD's momentum as part 1, Adam's moments as parts
  // 1 and 2 with the step count.
  if (s.momentum.size() == s.count) {
    state->parts.push_back(s.momentum);
  } else if (s.momentum.size() == adam_state_floats(s.count)) {
    const auto m = s.momentum.begin();
    const auto count = static_cast<std::ptrdiff_t>(s.count);
    state->parts.emplace_back(m, m + count);
    state->parts.emplace_back(m + count, m + 2 * count);
    state->adam_steps = adam_steps(s.momentum, s.count);
  }
  state->counts = encode_counts(counts);
  state->then = [then = std::move(then), started = metrics_now()] {
    replicated(started);
    then();
  };
  send(state);
}

void ReplicaLink::send(const std::shared_ptr<Replication>& r) {
  std::shared_ptr<Peer> backup;
  {
    std::lock_guard lock(link_mu_);
    backup = backup_;
  }
  // Sent to every backup in turn until one that is still this server's backup acknowledged it:
  // a backup given up meanwhile (REPLICA_SET named another) never holds the slice for a
  // promotion, and the new one may not have had it from its first snapshot (the slice was busy).
  if (!backup || backup == r->sent_to) return r->then();
  r->sent_to = backup;
  for (std::uint32_t part = 0; part < r->parts.size(); ++part) {
    Header h;
    h.type = MsgType::kReplicate;
    h.dtype = WireType::kF32;
    h.key = r->key;
    h.offset = r->offset;
    h.count = r->count;
    h.total = r->total;
    h.set_slice(r->index);
    h.set_part(part);
    if (part == 2) h.set_adam_steps(r->adam_steps);
    h.round = r->version;
    ConstBuffer b{r->parts[part].data(), r->count * sizeof(float)};
    backup->send(h, {&b, 1}, [r](const Status&) {});
  }
  Header c;
  c.type = MsgType::kReplicateCommit;
  c.key = r->key;
  c.set_slice(r->index);
  c.round = r->version;
  c.count = r->counts.size() / kReplicaCountBytes;
  const std::string what =
      fmt::format("REPLICATE of key {} slice {} version {}", r->key, r->index, r->version);
  c.request_id = acks_.add(
      *backup, what, [this, r, what](const Status& st, const Header&, std::span<const std::byte>) {
        // A backup lost now is the scheduler's to replace (REPLICA_SET); the slice goes on, its
        // versions unreplicated until then. The scheduler warns of a loss (INFO here: at the end
        // of a job the servers' connections close in any order).
        if (!st.ok()) PSRT_LOG_INFO("{} not acknowledged: {}", what, st.message());
        send(r);  // to the backup named since, if any; else the slice goes on
      });
  const auto id = c.request_id;
  backup->send_bytes(c, r->counts, [this, id](const Status& st) {
    if (!st.ok()) acks_.fail(id, st);
  });
}

void ReplicaLink::replicate_slice(Slice& s, std::function<void()> then) {
  std::vector<ReplicaCount> counts;
  std::uint64_t version;
  {
    std::lock_guard lock(s.mu);
    // An update queued or running replicates the slice when it ends; pull replies reading the
    // weights leave them as they are, so a copy taken now is a version.
    if (s.busy) return then();
    s.busy = true;
    counts = counts_locked(s, {});
    version = s.version;
  }
  replicate(s, s.weights, version, std::move(counts), [this, &s, then = std::move(then)] {
    {
      std::lock_guard lock(s.mu);
      s.busy = false;
    }
    owner_.after_change(s);
    then();
  });
}

Credential ReplicaLink::primary_credential(std::uint32_t rank) {
  std::lock_guard lock(link_mu_);
  if (rank != primary_)
    throw Error(
        ErrorCode::kAuthentication,
        fmt::format(
            "server {} is not the server that replicates to this one (the "
            "scheduler named {}): a server connects only to its own backup",
            rank, primary_ == kAnyRank ? std::string("none") : fmt::format("server {}", primary_)));
  return primary_credential_;
}

void ReplicaLink::check_primary(const Peer& peer, const Header& h) {
  // The handshake checked the credential for the primary of that moment; the primary may have
  // changed since (a REPLICA_SET after a loss), and then this connection's copies are not wanted.
  std::lock_guard lock(link_mu_);
  if (peer.rank() != primary_ || !peer.credential() || *peer.credential() != primary_credential_)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} from {}, which is not the server that replicates to this one now",
                            to_string(h.type), peer.name()));
}

MutableBuffer ReplicaLink::place(Peer& peer, const Header& h, std::size_t size) {
  if (h.type != MsgType::kReplicate)
    throw Error(ErrorCode::kProtocol, fmt::format("{} from {}: this server takes no replicas",
                                                  to_string(h.type), peer.name()));
  check_primary(peer, h);
  if (h.part() > 2)
    throw Error(ErrorCode::kProtocol, fmt::format("REPLICATE of part {}", h.part()));
  std::lock_guard lock(copies_mu_);
  auto& c = copies_[{h.key, h.slice()}];
  if (c.committed && (c.offset != h.offset || c.count != h.count || c.total != h.total))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("REPLICATE of key {} slice {} as [{}, +{}) of {}, but the copy holds "
                    "[{}, +{}) of {}",
                    h.key, h.slice(), h.offset, h.count, h.total, c.offset, c.count, c.total));
  c.key = h.key;
  c.index = h.slice();
  c.offset = h.offset;
  c.count = h.count;
  c.total = h.total;
  auto& buf = c.staged[h.part()];
  buf.resize(h.count);
  c.staged_version[h.part()] = h.round;
  if (h.part() == 2) c.staged_steps = h.adam_steps();
  return {buf.data(), size};
}

void ReplicaLink::on_message(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  switch (h.type) {
    case MsgType::kReplicate:
      return;  // landed in its staging buffer (place); the commit makes it the copy
    case MsgType::kReplicateCommit:
      return commit(peer, h, payload);
    case MsgType::kReplicateAck:
    case MsgType::kError:
      acks_.complete(peer, h, payload);
      return;
    default:
      throw Error(ErrorCode::kProtocol, fmt::format("{} from {}: not a replication message",
                                                    to_string(h.type), peer.name()));
  }
}

void ReplicaLink::commit(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  check_primary(peer, h);
  std::vector<ReplicaCount> counts;
  if (Status st = decode_counts(payload, counts); !st.ok())
    return peer.send_error(h.request_id, st.code(), st.message(), false);
  {
    std::lock_guard lock(copies_mu_);
    auto it = copies_.find({h.key, h.slice()});
    if (it == copies_.end() || it->second.staged_version[0] != h.round)
      return peer.send_error(h.request_id, ErrorCode::kProtocol,
                             fmt::format("REPLICATE_COMMIT of key {} slice {} version {} "
                                         "without its weights",
                                         h.key, h.slice(), h.round),
                             false);
    Copy& c = it->second;
    c.weights.swap(c.staged[0]);
    if (c.staged_version[1] != h.round) {
      c.momentum.clear();
    } else if (c.staged_version[2] != h.round) {
      c.momentum.swap(c.staged[1]);
    } else {  // Adam's layout (ps/optimizer_state.h)
      c.momentum.resize(adam_state_floats(c.count));
      std::copy(c.staged[1].begin(), c.staged[1].end(), c.momentum.begin());
      std::copy(c.staged[2].begin(), c.staged[2].end(),
                c.momentum.begin() + static_cast<std::ptrdiff_t>(c.count));
      set_adam_steps(c.momentum, c.count, c.staged_steps);
    }
    c.staged_version[0] = c.staged_version[1] = c.staged_version[2] = UINT64_MAX;
    c.version = h.round;
    c.counts = std::move(counts);
    c.source = peer.rank();
    c.committed = true;
  }
  Header ack;
  ack.type = MsgType::kReplicateAck;
  ack.request_id = h.request_id;
  return peer.send(ack);
}

std::size_t ReplicaLink::promote(std::uint32_t lost) {
  std::vector<Copy> taken;
  {
    std::lock_guard lock(copies_mu_);
    for (auto it = copies_.begin(); it != copies_.end();) {
      if (it->second.committed && it->second.source == lost) {
        taken.push_back(std::move(it->second));
        it = copies_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const std::set<std::uint32_t> members = owner_.members();
  std::size_t promoted = 0;
  for (auto& c : taken) {
    auto s = std::make_unique<Slice>();
    s->key = c.key;
    s->index = c.index;
    s->offset = c.offset;
    s->count = c.count;
    s->total = c.total;
    s->weights = std::move(c.weights);
    s->momentum = std::move(c.momentum);
    s->version = c.version;
    std::uint64_t slowest = UINT64_MAX;
    for (const auto& n : c.counts)
      slowest = std::min(slowest, n.applied);
    for (auto r : members) {
      auto n = std::find_if(c.counts.begin(), c.counts.end(),
                            [r](const ReplicaCount& x) { return x.rank == r; });
      served::WorkerState& w = s->workers[r];
      if (n != c.counts.end()) {
        w.applied = n->applied;
        w.received = n->pushes;
      } else {
        w.applied = slowest == UINT64_MAX ? 0 : slowest;
      }
    }
    if (!owner_.adopt(std::move(s))) {
      PSRT_LOG_WARN("key {} slice {}: already held here; the copy from server {} is dropped", c.key,
                    c.index, lost);
      continue;
    }
    ++promoted;
  }
  return promoted;
}

void ReplicaLink::on_replica_set(Peer& scheduler, const Header& h,
                                 std::span<const std::byte> payload) {
  std::vector<std::string> address;
  if (Status st = decode_lines(payload, address); !st.ok() || address.size() > 1)
    return scheduler.send_error(h.request_id, ErrorCode::kProtocol,
                                "REPLICA_SET without a usable backup address", false);
  const std::uint32_t lost = h.lost_server();
  if (lost != kAnyRank && h.promote_to() == self_rank_) {
    const std::size_t n = promote(lost);
    PSRT_LOG_INFO("server {} lost: {} of its slices promoted here from their copies", lost, n);
  }
  const std::uint32_t backup_rank =
      address.empty() ? kAnyRank
                      : static_cast<std::uint32_t>(std::min<std::uint64_t>(h.round, kAnyRank));
  const auto primary = static_cast<std::uint32_t>(std::min<std::uint64_t>(h.total, kAnyRank));
  auto peer = scheduler.shared_from_this();
  auto ack = [peer, id = h.request_id](const Status& st) {
    if (!st.ok()) return peer->send_error(id, st.code(), st.message(), false);
    Header r;
    r.type = MsgType::kReplicaSetAck;
    r.request_id = id;
    peer->send(r);
  };
  bool same;
  std::shared_ptr<Peer> old;
  {
    std::lock_guard lock(link_mu_);
    primary_ = primary;
    primary_credential_ = primary == kAnyRank ? Credential{} : credential_of(h);
    same = backup_rank == backup_rank_ && backup_;
    if (!same) {
      old = std::move(backup_);
      backup_rank_ = kAnyRank;
    }
  }
  // A backup given up (lost, perhaps only silent): its unanswered acknowledgements fail when the
  // connection closes, so that the updates waiting on them go on.
  if (old) old->close();
  // The same backup holds a copy of every slice here but those just promoted.
  if (address.empty() || (same && lost == kAnyRank)) return ack(Status());
  // Connecting (the handshake needs the progress thread) and sending every slice happen on the
  // connector thread; the scheduler hears back once the backup acknowledged every copy.
  (void)connector_.push([this, addr = address[0], backup_rank, same, ack, lost] {
    copy_to_backup(addr, backup_rank, same, lost, ack);
  });
}

void ReplicaLink::copy_to_backup(const std::string& addr, std::uint32_t backup_rank, bool same,
                                 std::uint32_t lost,
                                 const std::function<void(const Status&)>& ack) {
  if (before_replicating) before_replicating(lost);
  if (!same) {
    try {
      auto backup = connect_backup(addr, backup_rank);
      std::lock_guard lock(link_mu_);
      backup_ = backup;
      backup_rank_ = backup_rank;
    } catch (const Error& e) {
      auto why = fmt::format("server {} cannot reach server {} to replicate to it: {}", self_rank_,
                             backup_rank, e.what());
      PSRT_LOG_ERROR("{}", why);
      return ack(Status(e.code(), why));
    }
    PSRT_LOG_INFO("replicating to server {} at {}", backup_rank, addr);
  }
  const std::vector<Slice*> all = owner_.slices();
  // Acknowledged once every slice's copy was (or the update holding it replicates it).
  auto left = std::make_shared<std::atomic<std::size_t>>(all.size() + 1);
  auto one_done = [this, left, backup_rank, ack] {
    if (left->fetch_sub(1) != 1) return;
    std::shared_ptr<Peer> now;
    {
      std::lock_guard lock(link_mu_);
      now = backup_;
    }
    if (!now)
      return ack(Status(ErrorCode::kPeerFailed,
                        fmt::format("server {} lost its new backup, server {}, before it held "
                                    "a copy of every slice",
                                    self_rank_, backup_rank)));
    ack(Status());
  };
  for (Slice* s : all)
    replicate_slice(*s, one_done);
  one_done();
}

std::shared_ptr<Peer> ReplicaLink::connect_backup(const std::string& address, std::uint32_t rank) {
  // The backup hears of its new primary from the scheduler at about the time this server hears
  // of its new backup, and refuses it until then: retried until the connect timeout.
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout_;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      return endpoint_->connect(transport_, address, self_rank_, Role::kServer, rank,
                                std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kAuthentication || left < std::chrono::milliseconds(20)) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ReplicaLink::peer_closed(Peer& peer, const Status& why) {
  if (peer.role() != Role::kServer) return;
  acks_.fail_peer(peer, why);
  std::lock_guard lock(link_mu_);
  if (backup_.get() == &peer) {
    PSRT_LOG_INFO(
        "lost the backup server {}: {}; slices go on unreplicated until the scheduler "
        "names another",
        backup_rank_, why.message());
    backup_.reset();
  }
}

std::optional<served::SliceView> ReplicaLink::copy(std::uint64_t key, std::uint32_t index) {
  std::lock_guard lock(copies_mu_);
  auto it = copies_.find({key, index});
  if (it == copies_.end() || !it->second.committed) return std::nullopt;
  return served::SliceView{it->second.version, it->second.weights, it->second.momentum};
}

}  // namespace psrt::ps
