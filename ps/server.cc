#include "ps/server.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "ps/backup_log.h"
#include "ps/checkpoint.h"
#include "ps/metric_hooks.h"
#include "ps/server_device.h"
#include "ps/shard_map.h"
#include "transport/byte_streams.h"

namespace psrt::ps {
namespace {

Error refuse(ErrorCode code, const std::string& message) {
  return Error(code, message);
}

}  // namespace

Server::Server(ServerConfig config)
    : config_(std::move(config)), backup_log_(make_backup_log(config_)) {
  if (!config_.checkpoint_dir.empty()) check_checkpoint_dir(config_.checkpoint_dir);
  if (config_.device.is_cuda()) {
    try {
      gpu_ = std::make_unique<Gpu>(config_.device.index);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("--server-device {}: {}", device::to_string(config_.device),
                                        e.what()));
    }
  }
  UpdateStage::Config stage;
  stage.mode = config_.mode;
  stage.staleness = config_.staleness;
  stage.backup_workers = config_.backup_workers;
  stage.average = config_.average;
  stage.checkpoint_dir = config_.checkpoint_dir;
  stage.checkpoint_every = config_.checkpoint_every;
  stage.threads = config_.threads;
  stage.trace_path = config_.trace_path;
  stage.on_device = gpu_ != nullptr;
  stage_ = std::make_unique<UpdateStage>(std::move(stage), static_cast<UpdateStage::Owner&>(*this));
}

Server::~Server() {
  if (link_) link_->stop();
  stop();
}

void Server::stop() {
  if (stage_) stage_->stop();
}

void Server::enable_replicas(std::shared_ptr<Endpoint> endpoint, transport::Transport& t,
                             std::uint32_t self_rank, std::chrono::milliseconds connect_timeout) {
  if (gpu_)
    throw Error(ErrorCode::kInvalidArgument,
                "--replicas 2 needs cpu servers: a cuda server (--server-device) does not "
                "replicate its slices");
  link_ = std::make_unique<ReplicaLink>(std::move(endpoint), t, self_rank, connect_timeout,
                                        static_cast<ReplicaLink::Owner&>(*this));
  link_->before_replicating = [this](std::uint32_t lost) {
    if (before_replicating) before_replicating(lost);
  };
  stage_->set_replica_link(link_.get());
}

Server::Slice* Server::find(std::uint64_t key, std::uint32_t index) {
  std::shared_lock lock(slices_mu_);
  auto it = slices_.find({key, index});
  return it == slices_.end() ? nullptr : it->second.get();
}

std::optional<Credential> Server::credential_for(Role role, std::uint32_t rank) {
  if (role == Role::kServer) {
    if (!link_)
      throw refuse(ErrorCode::kAuthentication,
                   fmt::format("server {} connects to a server started without replicas, which "
                               "accepts no server",
                               rank));
    return link_->primary_credential(rank);
  }
  if (role != Role::kWorker) return std::nullopt;  // ps/session/permissions.h allows it nothing
  std::lock_guard lock(members_mu_);
  auto it = credentials_.find(rank);
  if (it == credentials_.end())
    throw refuse(ErrorCode::kAuthentication,
                 fmt::format("worker rank {} is not a live member of the job: a worker connects "
                             "to servers only as the rank the scheduler gave it",
                             rank));
  return it->second;
}

void Server::check_live_worker(const Peer& peer, const Header& h) {
  if (peer.role() != Role::kWorker)
    throw refuse(ErrorCode::kProtocol,
                 fmt::format("{} from a {}", to_string(h.type), to_string(peer.role())));
  // The rank this connection proved must still be that registration's: a rank that left and
  // was given to a new worker is not the old connection's any more.
  std::lock_guard lock(members_mu_);
  auto it = credentials_.find(peer.rank());
  if (it == credentials_.end() || !peer.credential() || *peer.credential() != it->second)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("{} from {}, which is no longer a live member of the job (it "
                             "unregistered or was declared lost)",
                             to_string(h.type), peer.name()));
}

void Server::charge_init(const Peer& peer, const Header& h) {
  if (find(h.key, h.slice())) return;  // stores nothing new
  std::lock_guard lock(members_mu_);
  InitQuota& q = init_quotas_[peer.rank()];
  const bool new_key = !q.keys.count(h.key);
  if (new_key && q.keys.size() >= config_.max_keys_per_worker)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("INIT of key {} from {}: it stored {} keys on this server, the most "
                             "one worker may (PSRT_MAX_KEYS_PER_WORKER={})",
                             h.key, peer.name(), q.keys.size(), config_.max_keys_per_worker));
  if (q.slices >= config_.max_slices_per_worker)
    throw refuse(
        ErrorCode::kInvalidArgument,
        fmt::format("INIT of key {} slice {} from {}: it stored {} slices on this server, "
                    "the most one worker may (PSRT_MAX_SLICES_PER_WORKER={})",
                    h.key, h.slice(), peer.name(), q.slices, config_.max_slices_per_worker));
  if (new_key) q.keys.insert(h.key);
  ++q.slices;
}

Server::Slice& Server::checked_slice(const Peer& peer, const Header& h) {
  check_live_worker(peer, h);
  Slice* s = find(h.key, h.slice());
  if (!s)
    throw refuse(ErrorCode::kNotFound,
                 fmt::format("unknown key {} (slice {}) on this server: call init() for the key "
                             "before pushing or pulling it",
                             h.key, h.slice()));
  if (s->offset != h.offset || s->count != h.count || s->total != h.total)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("{} of key {} slice {} for elements [{}, +{}) of {}, but the slice "
                             "holds [{}, +{}) of {}: wrong length",
                             to_string(h.type), h.key, h.slice(), h.offset, h.count, h.total,
                             s->offset, s->count, s->total));
  return *s;
}

namespace {

// True when the checkpoint manifest in `dir` places slice h.slice() of key h.key as [h.offset,
// +h.count) of h.total.
bool in_manifest(const std::string& dir, std::uint32_t num_servers, const Header& h) {
  if (dir.empty() || num_servers == 0) return false;
  try {
    ShardMap map(num_servers, 4);
    if (!read_manifest(dir, map) || map.total(h.key) != h.total) return false;
    for (const auto& s : *map.find(h.key))
      if (s.index == h.slice()) return s.offset == h.offset && s.count == h.count;
  } catch (const Error&) {
  }
  return false;
}

}  // namespace

void Server::check_init_slice(const Header& h) const {
  // A resumed slice is checked against its checkpoint file instead (its cut may be older).
  if (config_.partition_bytes == 0 || config_.resume_round > 0) return;
  const Cut cut = job_cut(config_.partition_bytes, config_.balanced_cut, config_.num_servers,
                          transport::moves_as_byte_streams(config_.transport));
  const auto want = slice_bounds(h.total, cut, h.slice());
  if ((!want || want->offset != h.offset || want->count != h.count) &&
      in_manifest(config_.checkpoint_dir, config_.num_servers, h))
    return;  // cut by an earlier run with another --partition-bytes, not resumed yet
  if (!want)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("INIT of key {} slice {} of {} elements: the shard map has no such "
                             "slice ({} cut, --partition-bytes {}); init the slices LOCATE "
                             "returned",
                             h.key, h.slice(), h.total, config_.balanced_cut ? "balanced" : "fixed",
                             config_.partition_bytes));
  if (want->offset != h.offset || want->count != h.count)
    throw refuse(
        ErrorCode::kInvalidArgument,
        fmt::format("INIT of key {} slice {} as [{}, +{}) of {}, but the shard map cuts "
                    "it as [{}, +{}): init the slices LOCATE returned",
                    h.key, h.slice(), h.offset, h.count, h.total, want->offset, want->count));
}

float Server::admit_push_locked(Slice& s, const Header& h, std::uint32_t rank) {
  auto w = s.workers.find(rank);
  if (w == s.workers.end())
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("worker {} is not a live member of the job (it unregistered or "
                             "was declared lost)",
                             rank));
  // Pushes still arriving count: each holds its payload's memory already.
  if (w->second.queued.size() + w->second.arriving >= config_.max_queued)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("worker {} has {} gradients of key {} slice {} waiting or arriving: "
                             "it pushes without pulling; pull (or push_pull) to wait for the "
                             "rounds",
                             rank, w->second.queued.size() + w->second.arriving, h.key, h.slice()));
  // Queued and arriving gradients of a slice share one dtype (this check keeps it so): one of
  // them tells. A push still arriving counts: it is queued once it landed, and an update must
  // never read gradients of two dtypes as one.
  std::optional<WireType> current;
  if (s.arriving > 0) current = s.arriving_dtype;
  for (const auto& [r, ws] : s.workers) {
    if (current) break;
    if (!ws.queued.empty()) current = ws.queued.front().dtype;
  }
  if (current && *current != h.dtype)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("key {} slice {} is pushed as {} by one worker and {} by worker {} in "
                             "the same round: push a key in one dtype",
                             h.key, h.slice(), to_string(*current), to_string(h.dtype), rank));
  const float lr = h.learning_rate();
  if (!std::isfinite(lr) || lr < 0.f)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("{} of key {} slice {} carries learning rate {}: it must be a "
                             "finite number >= 0",
                             to_string(h.type), h.key, h.slice(), lr));
  return lr;
}

MutableBuffer Server::place(Peer& peer, const Header& h, std::size_t size, std::uint64_t cookie) {
  if (peer.role() == Role::kServer) {
    if (!link_)
      throw refuse(ErrorCode::kProtocol, fmt::format("{} from {}: this server takes no replicas",
                                                     to_string(h.type), peer.name()));
    return link_->place(peer, h, size);
  }
  InFlight in;
  if (h.type == MsgType::kSetOptimizerState) {
    checked_slice(peer, h);
    in.init.resize(h.count);
  } else if (h.type == MsgType::kInit) {
    check_live_worker(peer, h);
    check_init_slice(h);
    check_aggregate_init(h);
    charge_init(peer, h);
    in.init.resize(h.count);
  } else if (h.type == MsgType::kPush || h.type == MsgType::kPushPull) {
    Slice& s = checked_slice(peer, h);
    std::lock_guard lock(s.mu);
    const float lr = admit_push_locked(s, h, peer.rank());
    auto it = std::find_if(s.free.begin(), s.free.end(), [&](auto& b) { return b.size == size; });
    if (it != s.free.end()) {
      in.grad = std::move(*it);
      s.free.erase(it);
    } else if (!gpu_) {
      in.grad.where = HostGrad{std::make_unique_for_overwrite<std::byte[]>(size)};
      in.grad.size = size;
      buffer_allocated(size);
    }
    in.grad.dtype = h.dtype;
    in.grad.lr = lr;
    in.grad.placed = metrics_now();
    in.slice = &s;
    ++s.arriving;
    ++s.workers[peer.rank()].arriving;  // admitted: a live member of the slice
    s.arriving_dtype = h.dtype;
  } else {
    throw refuse(ErrorCode::kProtocol,
                 fmt::format("a server does not accept {}", to_string(h.type)));
  }
  transport::Placement p{{in.init.data(), size}, cookie};
  if (in.slice) {
    if (gpu_) {
      try {
        place_on_device(in.grad, size, p);
      } catch (...) {
        std::lock_guard lock(in.slice->mu);
        arrived_locked(*in.slice, peer.rank());
        throw;
      }
    } else {
      p.dest.data = std::get<HostGrad>(in.grad.where).data.get();
    }
  }
  std::lock_guard lock(inflight_mu_);
  inflight_[{peer.id(), p.cookie}] = std::move(in);
  return p.dest;
}

void Server::on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                        const transport::Placement& placement) {
  auto take = [&] {
    std::lock_guard lock(inflight_mu_);
    auto node = inflight_.extract({peer.id(), placement.cookie});
    if (node.empty()) throw refuse(ErrorCode::kInternal, "payload without a placement");
    return std::move(node.mapped());
  };
  if (peer.role() == Role::kServer) {
    if (!link_)
      throw refuse(ErrorCode::kProtocol, fmt::format("{} from {}: this server takes no replicas",
                                                     to_string(h.type), peer.name()));
    return link_->on_message(peer, h, payload);
  }
  switch (h.type) {
    case MsgType::kInit:
      return init_if_placed(peer, h, take());
    case MsgType::kPush:
    case MsgType::kPushPull: {
      InFlight in = take();
      return on_push(peer, h, in);
    }
    case MsgType::kPull:
      return on_pull(peer, h, checked_slice(peer, h));
    case MsgType::kVersion:
      return on_version(peer, h, checked_slice(peer, h));
    case MsgType::kOptimizerState:
      return on_optimizer_state(peer, h, checked_slice(peer, h));
    case MsgType::kSetOptimizerState: {
      InFlight in = take();
      return on_set_optimizer_state(peer, h, in);
    }
    case MsgType::kDeviceInfo:
      return on_device_info(peer, h, payload);
    case MsgType::kPushIpc:
    case MsgType::kPushPullIpc:
    case MsgType::kPullIpc:
      return on_ipc(peer, h, payload);
    case MsgType::kSetOptimizer:
      return on_set_optimizer(peer, h, payload);
    case MsgType::kMembership:
      if (peer.role() != Role::kScheduler)
        throw refuse(ErrorCode::kProtocol, "MEMBERSHIP from a non-scheduler");
      return on_membership(peer, h, payload);
    case MsgType::kPlacementReply:
      if (peer.role() != Role::kScheduler)
        throw refuse(ErrorCode::kProtocol, "PLACEMENT_REPLY from a non-scheduler");
      return on_placement_reply(h);
    case MsgType::kReplicaSet:
      if (peer.role() != Role::kScheduler)
        throw refuse(ErrorCode::kProtocol, "REPLICA_SET from a non-scheduler");
      if (!link_)
        return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                               "REPLICA_SET to a server started without replicas", false);
      return link_->on_replica_set(peer, h, payload);
    default:
      // The registration's credential: proven to the backup this server replicates to.
      if (peer.role() == Role::kScheduler && h.type == MsgType::kRegisterReply && link_)
        link_->set_credential(credential_of(h));
      if (peer.role() == Role::kScheduler && h.type == MsgType::kError &&
          on_placement_error(h, payload))
        return;
      if (peer.role() == Role::kScheduler && on_control) return on_control(h, payload);
      throw refuse(ErrorCode::kProtocol,
                   fmt::format("a server does not accept {}", to_string(h.type)));
  }
}

void Server::on_membership(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  // Refused with an ERROR the scheduler acts on; the members stay as they were.
  std::vector<MemberRecord> members;
  if (Status s = decode_members(payload, members); !s.ok())
    return peer.send_error(h.request_id, s.code(), "membership change refused: " + s.message(),
                           false);
  remember_scheduler(peer);  // asked where slices are placed (PLACEMENT)
  std::vector<std::uint32_t> ranks;
  {
    std::lock_guard lock(members_mu_);
    credentials_.clear();
    for (const auto& m : members) {
      ranks.push_back(m.rank);
      credentials_[m.rank] = m.credential;
    }
  }
  set_members(ranks);
  Header ack;
  ack.type = MsgType::kMembershipAck;
  ack.request_id = h.request_id;
  return peer.send(ack);
}

void Server::on_init(Peer& peer, const Header& h, InFlight& in) {
  bool stored = false;
  Slice* s = nullptr;
  {
    std::unique_lock lock(slices_mu_);
    auto& slot = slices_[{h.key, h.slice()}];
    if (!slot) {
      auto fresh = std::make_unique<Slice>();
      fresh->key = h.key;
      fresh->index = h.slice();
      fresh->offset = h.offset;
      fresh->count = h.count;
      fresh->total = h.total;
      fresh->update = static_cast<KeyUpdate>(h.key_update());
      try {
        if (config_.resume_round > 0) {
          SliceRecord rec{0, h.slice(), h.offset, h.count};
          SliceState st = read_slice_checkpoint(config_.checkpoint_dir, config_.resume_round, h.key,
                                                rec, h.total);
          fresh->weights = std::move(st.weights);
          fresh->momentum = std::move(st.momentum);
          fresh->version = st.version;
        } else {
          fresh->weights = std::move(in.init);
        }
        if (gpu_) init_on_device(*fresh);
      } catch (const Error& e) {
        slices_.erase({h.key, h.slice()});
        lock.unlock();
        PSRT_LOG_ERROR("{}", e.what());
        return peer.send_error(h.request_id, e.code(), e.what(), false);
      }
      std::lock_guard members(members_mu_);
      for (auto r : members_)
        add_worker_locked(*fresh, r);
      slot = std::move(fresh);
      stored = true;
      slice_stored(h.count * sizeof(float));
    }
    s = slot.get();
  }
  if (s->update != static_cast<KeyUpdate>(h.key_update()))
    return peer.send_error(
        h.request_id, ErrorCode::kInvalidArgument,
        fmt::format("init of key {} as {}, but it exists as {}: every init of a key must choose "
                    "the same KeyUpdate",
                    h.key, to_string(static_cast<KeyUpdate>(h.key_update())), to_string(s->update)),
        false);
  if (s->offset != h.offset || s->count != h.count || s->total != h.total)
    return peer.send_error(
        h.request_id, ErrorCode::kInvalidArgument,
        fmt::format("init of key {} slice {} as [{}, +{}) of {}, but it exists as [{}, +{}) of {}",
                    h.key, h.slice(), h.offset, h.count, h.total, s->offset, s->count, s->total),
        false);
  Header r;
  r.type = MsgType::kInitReply;
  r.request_id = h.request_id;
  r.key = h.key;
  r.set_slice(h.slice());
  r.set_stored(stored);
  {
    std::lock_guard lock(s->mu);
    r.round = s->version;
  }
  // With replicas the stored value is on the backup before the worker hears of it.
  if (stored && link_)
    return link_->replicate_slice(*s, [p = peer.shared_from_this(), r] { p->send(r); });
  peer.send(r);
}

void Server::on_set_optimizer(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  OptimizerConfig c;
  if (Status st = decode_optimizer(payload, c); !st.ok())
    return peer.send_error(h.request_id, st.code(), st.message(), false);
  {
    std::lock_guard lock(sgd_mu_);
    if (c != config_.sgd) {
      if (sgd_set_by_worker_)
        return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                               fmt::format("{} sets a different optimizer than a worker (this "
                                           "one or another) set before: the job's optimizer is "
                                           "set once, with the same OptimizerConfig on every "
                                           "worker",
                                           peer.name()),
                               false);
      // psrun's --max-grad-norm is the job's clipping: a worker's config may not drop it.
      if (config_.sgd.max_grad_norm > 0.f && c.max_grad_norm != config_.sgd.max_grad_norm)
        return peer.send_error(
            h.request_id, ErrorCode::kInvalidArgument,
            fmt::format("{} sets max_grad_norm {} but the job runs with psrun --max-grad-norm "
                        "{}: pass the same value, or drop --max-grad-norm (psrt.torch clips with "
                        "torch's norm over the whole model: docs/migrating.md)",
                        peer.name(), c.max_grad_norm, config_.sgd.max_grad_norm),
            false);
      std::shared_lock slices(slices_mu_);
      for (const auto& [id, s] : slices_) {
        std::lock_guard sl(s->mu);
        if (s->version > 0)
          return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                                 "set_optimizer() after updates were applied: call it before the "
                                 "first push",
                                 false);
      }
      config_.sgd = c;
    }
    sgd_set_by_worker_ = true;
  }
  Header r;
  r.type = MsgType::kSetOptimizerReply;
  r.request_id = h.request_id;
  peer.send(r);
}

void Server::arrived_locked(Slice& s, std::uint32_t rank) {
  if (s.arriving > 0) --s.arriving;
  if (auto w = s.workers.find(rank); w != s.workers.end() && w->second.arriving > 0)
    --w->second.arriving;
}

void Server::on_push(Peer& peer, const Header& h, InFlight& in) {
  Slice& s = *in.slice;
  const auto rank = peer.rank();
  if (gpu_) {
    try {
      after_receive_on_device(in.grad);
    } catch (...) {
      std::lock_guard lock(s.mu);
      arrived_locked(s, rank);
      throw;
    }
  }
  bool member = false;
  in.grad.arrived = gradient_arrived(in.grad.placed, in.grad.size, s.key, s.index);
  {
    std::lock_guard lock(s.mu);
    arrived_locked(s, rank);
    auto w = s.workers.find(rank);
    if (link_ && w != s.workers.end() && h.round != 0 && h.round <= w->second.received) {
      // A push re-sent after its server was lost (replicas: round = the worker's push number on
      // the slice) that this slice already holds: acknowledged, not applied again.
      member = true;
      if (in.grad.reusable() && s.free.size() < s.workers.size() + 2)
        s.free.push_back(std::move(in.grad));
      if (h.type == MsgType::kPushPull)
        s.waiters.push_back({peer.shared_from_this(), h.request_id, rank, h.round});
    } else if (w != s.workers.end()) {
      member = true;
      tag_push_locked(w->second, in.grad);
      w->second.queued.push_back(std::move(in.grad));
      w->second.received++;
      if (h.type == MsgType::kPushPull)
        s.waiters.push_back({peer.shared_from_this(), h.request_id, rank, w->second.received});
    }
  }
  if (!member)
    return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                           fmt::format("worker {} left the job while its push arrived", rank),
                           false);
  if (h.type == MsgType::kPush) {
    Header ack;
    ack.type = MsgType::kPushAck;
    ack.request_id = h.request_id;
    peer.send(ack);
  }
  after_change(s);
}

void Server::on_pull(Peer& peer, const Header& h, Slice& s) {
  {
    std::lock_guard lock(s.mu);
    auto w = s.workers.find(peer.rank());
    std::uint64_t target = w == s.workers.end() ? 0 : w->second.received;
    s.waiters.push_back({peer.shared_from_this(), h.request_id, peer.rank(), target});
  }
  after_change(s);
}

void Server::on_version(Peer& peer, const Header& h, Slice& s) {
  Header r;
  r.type = MsgType::kVersionReply;
  r.request_id = h.request_id;
  r.key = s.key;
  r.set_slice(s.index);
  {
    std::lock_guard lock(s.mu);
    r.round = s.version;
  }
  peer.send(r);
}

std::vector<Server::PullWaiter> Server::ready_waiters_locked(Slice& s) {
  std::vector<PullWaiter> ready;
  // An update in place writes the weights: no reply may read them now. One into `spare` leaves
  // them as they are; but in sync mode a pull served now would get the version before a round
  // that runs without its worker (one that joined, or was left out with backup workers), whose
  // next gradient would then land a round late: it waits for the round (docs/elastic.md).
  if (s.busy && (!s.into_spare || config_.mode == Mode::kSync)) return ready;
  auto keep = s.waiters.begin();
  for (auto& w : s.waiters) {
    auto ws = s.workers.find(w.rank);
    const std::uint64_t applied = ws == s.workers.end() ? w.target : ws->second.applied;
    if (applied >= w.target) {
      ready.push_back(std::move(w));
    } else {
      *keep++ = std::move(w);
    }
  }
  s.waiters.erase(keep, s.waiters.end());
  s.readers += static_cast<int>(ready.size());
  for (auto& w : ready) {
    w.source = pull_source(s);
    w.version = s.version;
    note_reply_locked(s, w);
  }
  return ready;
}

void Server::send_pull_replies(Slice& s, std::vector<PullWaiter> ready) {
  for (auto& w : ready) {
    if (w.out) {
      // The weights go straight into the worker's GPU memory; the reply only says so.
      reply_ipc_pull(s, std::move(w));
      continue;
    }
    Header r;
    r.type = MsgType::kPullReply;
    r.dtype = WireType::kF32;
    r.request_id = w.request_id;
    r.key = s.key;
    r.offset = s.offset;
    r.count = s.count;
    r.total = s.total;
    r.set_slice(s.index);
    r.round = w.version;
    r.set_round_info(w.round_workers, w.late_dropped);
    ConstBuffer b = w.source;
    w.peer->send(
        r, {&b, 1},
        [this, &s, from = b.data, sent = metrics_now(), version = w.version](const Status& st) {
          if (st.ok()) reply_sent(sent, s.count * sizeof(float), s.key, s.index, version);
          release_reader(s, from);
        });
  }
}

void Server::release_reader(Slice& s, const void* source) {
  {
    std::lock_guard lock(s.mu);
    if (source != nullptr && !s.spare.empty() && source == s.spare.data())
      --s.spare_readers;
    else
      --s.readers;
  }
  after_change(s);
}

void Server::after_change(Slice& s) {
  std::vector<PullWaiter> ready;
  std::optional<Update> u;
  {
    std::lock_guard lock(s.mu);
    drop_late_locked(s);
    ready = ready_waiters_locked(s);
    u = stage_->next_locked(s);
  }
  if (!ready.empty()) send_pull_replies(s, std::move(ready));
  if (u) stage_->submit(std::move(*u));
}

OptimizerConfig Server::optimizer() {
  std::lock_guard lock(sgd_mu_);
  return config_.sgd;
}

std::vector<Server::Slice*> Server::slices() {
  std::vector<Slice*> all;
  std::shared_lock lock(slices_mu_);
  for (auto& [id, s] : slices_)
    all.push_back(s.get());
  return all;
}

std::set<std::uint32_t> Server::members() {
  std::lock_guard lock(members_mu_);
  return members_;
}

bool Server::adopt(std::unique_ptr<Slice> s) {
  std::unique_lock lock(slices_mu_);
  auto& slot = slices_[{s->key, s->index}];
  if (slot) return false;
  slot = std::move(s);
  return true;
}

std::optional<Server::SliceView> Server::held(std::uint64_t key, std::uint32_t index) {
  Slice* s = find(key, index);
  if (!s) return std::nullopt;
  std::lock_guard lock(s->mu);
  return SliceView{s->version, s->weights, s->momentum};
}

std::optional<Server::SliceView> Server::copy(std::uint64_t key, std::uint32_t index) {
  if (!link_) return std::nullopt;
  return link_->copy(key, index);
}

void Server::set_members(const std::vector<std::uint32_t>& ranks) {
  {
    std::lock_guard lock(members_mu_);
    members_ = {ranks.begin(), ranks.end()};
  }
  std::vector<Slice*> all;
  {
    std::shared_lock lock(slices_mu_);
    for (auto& [id, s] : slices_)
      all.push_back(s.get());
  }
  const std::set<std::uint32_t> live(ranks.begin(), ranks.end());
  for (Slice* s : all) {
    {
      std::lock_guard lock(s->mu);
      std::uint64_t slowest = UINT64_MAX;
      for (auto it = s->workers.begin(); it != s->workers.end();) {
        if (!live.count(it->first)) {
          it = s->workers.erase(it);
        } else {
          slowest = std::min(slowest, it->second.applied);
          ++it;
        }
      }
      // A joining worker starts level with the slowest one, so SSP does not wait for it to
      // replay rounds it was not part of. In sync mode its clock starts at 0 like its pushes:
      // a pull then waits for the round of its push (level with the others, the first push's
      // pull would be answered before its round ran, and its gradients would run rounds late).
      for (auto r : live)
        if (!s->workers.count(r))
          add_worker_locked(*s, r).applied =
              slowest == UINT64_MAX || config_.mode == Mode::kSync ? 0 : slowest;
      std::erase_if(s->waiters, [&](const PullWaiter& w) { return !live.count(w.rank); });
    }
    after_change(*s);
  }
}

void Server::on_peer_closed(Peer& peer, const Status& why) {
  std::vector<InFlight> dropped;
  {
    std::lock_guard lock(inflight_mu_);
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      if (it->first.first == peer.id()) {
        dropped.push_back(std::move(it->second));
        it = inflight_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& in : dropped) {
    if (!in.slice) continue;
    std::lock_guard lock(in.slice->mu);
    arrived_locked(*in.slice, peer.rank());
  }
  if (link_) link_->peer_closed(peer, why);
  placement_peer_closed(peer);
  if (peer.role() == Role::kScheduler)
    stop_job(Status(ErrorCode::kPeerFailed, "lost the scheduler: " + why.message()));
}

void Server::stop_job(const Status& why) {
  if (!on_control) return;
  Header stop;
  stop.type = MsgType::kShutdown;
  stop.set_error_code(why.code());
  on_control(stop, as_bytes(why.message()));
}

}  // namespace psrt::ps
