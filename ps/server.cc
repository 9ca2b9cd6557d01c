#include "ps/server.h"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdio>

#include "base/exception_status.h"
#include "base/log.h"
#include "kernels/dispatch.h"
#include "ps/backup_log.h"
#include "ps/checkpoint.h"
#include "ps/job_checkpoint.h"
#include "ps/metric_hooks.h"
#include "ps/optimizer_state.h"
#include "ps/server_device.h"
#include "ps/server_replica.h"
#include "ps/shard_map.h"

namespace psrt::ps {
namespace {

Error refuse(ErrorCode code, const std::string& message) {
  return Error(code, message);
}

}  // namespace

Server::Server(ServerConfig config)
    : config_(std::move(config)), backup_log_(make_backup_log(config_)) {
  if (config_.device.is_cuda()) {
    try {
      gpu_ = std::make_unique<Gpu>(config_.device.index);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("--server-device {}: {}", device::to_string(config_.device),
                                        e.what()));
    }
  }
  if (!config_.trace_path.empty()) {
    trace_ = std::fopen(config_.trace_path.c_str(), "a");
    if (!trace_)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot open the trace file '{}'", config_.trace_path));
  }
  if (!gpu_ && config_.threads > 1)
    splitter_ = std::make_unique<WorkQueue<std::function<void()>>>(
        config_.threads - 1, [](std::function<void()>& part) { part(); });
  pool_ = std::make_unique<WorkQueue<Update>>(config_.threads,
                                              [this](Update& u) { run_update_or_stop(u); });
}

Server::~Server() {
  if (replica_) replica_->connector.stop();
  stop();
  if (trace_) std::fclose(trace_);
}

void Server::stop() {
  if (pool_) pool_->stop();
  if (splitter_) splitter_->stop();
}

Server::Slice* Server::find(std::uint64_t key, std::uint32_t index) {
  std::shared_lock lock(slices_mu_);
  auto it = slices_.find({key, index});
  return it == slices_.end() ? nullptr : it->second.get();
}

std::optional<Credential> Server::credential_for(Role role, std::uint32_t rank) {
  if (role == Role::kServer) return primary_credential(rank);
  if (role != Role::kWorker) return std::nullopt;  // ps/permissions.h allows it nothing
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
                          config_.transport);
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
  if (w->second.queued.size() >= config_.max_queued)
    throw refuse(ErrorCode::kInvalidArgument,
                 fmt::format("worker {} has {} gradients of key {} slice {} waiting: it pushes "
                             "without pulling; pull (or push_pull) to wait for the rounds",
                             rank, w->second.queued.size(), h.key, h.slice()));
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

transport::Placement Server::place(Peer& peer, const Header& h, std::size_t size) {
  if (peer.role() == Role::kServer) return place_replica(peer, h, size);
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
    s.arriving_dtype = h.dtype;
  } else {
    throw refuse(ErrorCode::kProtocol,
                 fmt::format("a server does not accept {}", to_string(h.type)));
  }
  transport::Placement p{{in.init.data(), size}, next_cookie_.fetch_add(1)};
  if (in.slice) {
    if (gpu_) {
      try {
        place_on_device(in.grad, size, p);
      } catch (...) {
        std::lock_guard lock(in.slice->mu);
        arrived_locked(*in.slice);
        throw;
      }
    } else {
      p.dest.data = std::get<HostGrad>(in.grad.where).data.get();
    }
  }
  std::lock_guard lock(inflight_mu_);
  inflight_[{peer.id(), p.cookie}] = std::move(in);
  return p;
}

void Server::on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                        const transport::Placement& placement) {
  auto take = [&] {
    std::lock_guard lock(inflight_mu_);
    auto node = inflight_.extract({peer.id(), placement.cookie});
    if (node.empty()) throw refuse(ErrorCode::kInternal, "payload without a placement");
    return std::move(node.mapped());
  };
  if (peer.role() == Role::kServer) return on_replica_message(peer, h, payload);
  switch (h.type) {
    case MsgType::kInit: {
      InFlight in = take();
      return on_init(peer, h, in);
    }
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
    case MsgType::kMembership: {
      if (peer.role() != Role::kScheduler)
        throw refuse(ErrorCode::kProtocol, "MEMBERSHIP from a non-scheduler");
      // Refused with an ERROR the scheduler acts on; the members stay as they were.
      std::vector<MemberRecord> members;
      if (Status s = decode_members(payload, members); !s.ok())
        return peer.send_error(h.request_id, s.code(), "membership change refused: " + s.message(),
                               false);
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
    case MsgType::kReplicaSet:
      if (peer.role() != Role::kScheduler)
        throw refuse(ErrorCode::kProtocol, "REPLICA_SET from a non-scheduler");
      return on_replica_set(peer, h, payload);
    default:
      // The registration's credential: proven to the backup this server replicates to.
      if (peer.role() == Role::kScheduler && h.type == MsgType::kRegisterReply && replica_)
        replica_->endpoint->set_credential(credential_of(h));
      if (peer.role() == Role::kScheduler && on_control) return on_control(h, payload);
      throw refuse(ErrorCode::kProtocol,
                   fmt::format("a server does not accept {}", to_string(h.type)));
  }
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
  if (stored && replica_)
    return replicate_slice(*s, [p = peer.shared_from_this(), r] { p->send(r); });
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

void Server::arrived_locked(Slice& s) {
  if (s.arriving > 0) --s.arriving;
}

std::string Server::bad_grads(const Slice& s, const Update& u) {
  const WireType dtype = u.grads.front().dtype;
  for (std::size_t i = 0; i < u.grads.size(); ++i) {
    const GradBuf& g = u.grads[i];
    if (g.dtype != dtype || g.size != s.count * wire_size(dtype))
      return fmt::format(
          "key {} slice {}: the gradient of worker {} is {} bytes of {}, but the "
          "update reads {} bytes of {}",
          s.key, s.index, u.ranks[i], g.size, to_string(g.dtype), s.count * wire_size(dtype),
          to_string(dtype));
  }
  return {};
}

void Server::on_push(Peer& peer, const Header& h, InFlight& in) {
  Slice& s = *in.slice;
  const auto rank = peer.rank();
  if (gpu_) {
    try {
      after_receive_on_device(in.grad);
    } catch (...) {
      std::lock_guard lock(s.mu);
      arrived_locked(s);
      throw;
    }
  }
  bool member = false;
  in.grad.arrived = gradient_arrived(in.grad.placed, in.grad.size, s.key, s.index);
  {
    std::lock_guard lock(s.mu);
    arrived_locked(s);
    auto w = s.workers.find(rank);
    if (replica_ && w != s.workers.end() && h.round != 0 && h.round <= w->second.received) {
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

std::optional<Server::Update> Server::next_update_locked(Slice& s) {
  if (s.busy || s.workers.empty()) return std::nullopt;
  const std::optional<bool> into_spare = update_buffer_locked(s);
  if (!into_spare) return std::nullopt;
  std::vector<WorkerClock> clocks;
  clocks.reserve(s.workers.size());
  for (const auto& [rank, w] : s.workers)
    clocks.push_back(clock_locked(s, rank, w));
  auto ranks = next_update(config_.mode, config_.staleness, clocks, config_.backup_workers);
  if (ranks.empty()) return std::nullopt;
  Update u;
  u.slice = &s;
  u.slowest = UINT64_MAX;
  for (const auto& c : clocks)
    u.slowest = std::min(u.slowest, c.applied);
  for (auto r : ranks) {
    auto& w = s.workers.at(r);
    u.grads.push_back(std::move(w.queued.front()));
    w.queued.pop_front();
    u.clocks.push_back(w.applied);
  }
  u.ranks = std::move(ranks);
  if (metrics_on()) {
    std::vector<MetricsClock::time_point> arrived;
    for (const auto& g : u.grads)
      arrived.push_back(g.arrived);
    update_taken(config_.mode, u.ranks, arrived, u.clocks, u.slowest);
  }
  u.into_spare = *into_spare;
  s.busy = true;
  s.into_spare = *into_spare;
  return u;
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
    u = next_update_locked(s);
  }
  if (!ready.empty()) send_pull_replies(s, std::move(ready));
  if (u) submit(std::move(*u));
}

void Server::submit(Update u) {
  if (run_inline(u)) return;
  // Refused only once stop() began: the job is ending, and the slice stays busy.
  (void)pool_->push(std::move(u));
}

void Server::run_update(Update& u) {
  const auto started = metrics_now();
  Slice& s = *u.slice;
  OptimizerConfig cfg;
  {
    std::lock_guard lock(sgd_mu_);
    cfg = config_.sgd;
  }
  if (u.grads.front().lr > 0.f) cfg.lr = u.grads.front().lr;
  std::uint64_t version;
  {
    std::lock_guard lock(s.mu);
    assert(s.busy && "an update runs only on a slice next_update_locked() marked busy");
    assert((u.into_spare ? s.spare_readers : s.readers) == 0 &&
           "an update never writes a buffer a pull reply reads");
    version = s.version + 1;
  }
  const bool cadence =
      may_checkpoint() && config_.checkpoint_every > 0 && version % config_.checkpoint_every == 0;
  const bool checkpoint_due =
      cadence || (may_checkpoint() && checkpoint_requested(config_.checkpoint_dir, version));
  // Only this thread touches weights and momentum while the slice is busy (no pull reply is in
  // flight either), so the update runs without the slice lock (server.h, "The one access
  // without a lock"; asserted above).
  kernels::StepResult result;
  std::string bad = bad_grads(s, u);
  try {
    if (!bad.empty()) {
      // admit_push_locked keeps this from happening; if it did, reading on would read past a
      // buffer or misread one. Nothing is applied, and the server stops the job below.
      PSRT_LOG_ERROR("update of key {} slice {} not applied: {}", s.key, s.index, bad);
    } else if (s.update != KeyUpdate::kOptimizer) {
      result = aggregate_only(s, u);
    } else if (gpu_) {
      result = update_on_device(s, u, cfg, checkpoint_due);
    } else {
      // The optimizer state (SGD's momentum, Adam's moments and step count; ps/optimizer_state.h).
      StateUpdate state(s.momentum, s.count, version - 1, cfg,
                        fmt::format("key {} slice {}", s.key, s.index));
      std::vector<const void*> grads;
      for (const auto& g : u.grads)
        grads.push_back(std::get<HostGrad>(g.where).data.get());
      const float* source = nullptr;
      float* target = update_target(s, u, &source);
      kernels::SliceUpdate k = slice_update(s, u, grads, target, nullptr, false);
      state.attach(k);
      k.weights_in = source;
      result = apply_host_update(k, cfg);
      state.finish(result);
    }
  } catch (...) {
    // Whatever failed (a kernel error, no memory for the momentum buffer), the round is not in
    // the weights: the server stops the job below rather than serve them as if it were.
    bad = current_exception_status(fmt::format("update of key {} slice {}", s.key, s.index))
              .message();
    PSRT_LOG_ERROR("{}", bad);
  }
  if (result.skipped)
    PSRT_LOG_WARN(
        "key {} slice {} version {}: the aggregated gradient holds a NaN or an "
        "infinity (norm {}); update skipped, weights and momentum unchanged",
        s.key, s.index, version, result.grad_norm);
  if (checkpoint_due && bad.empty()) write_checkpoint(s, u, version, cadence, result.skipped);
  const bool optimizer = s.update == KeyUpdate::kOptimizer;
  trace(u, version, optimizer && kernels::needs_prepass(cfg) ? &result : nullptr);
  update_done(started, s.key, s.index, version);
  // Workers would go on from weights that miss this round: the job must not end as a success.
  if (!bad.empty())
    stop_job(Status(ErrorCode::kInternal, "an update could not be applied: " + bad));
  const bool written = bad.empty() && !result.skipped;
  if (replica_ && bad.empty()) return replicate_update(u, version, written);
  finish_update(u, version, written);
}

void Server::write_checkpoint(const Slice& s, const Update& u, std::uint64_t version, bool cadence,
                              bool skipped) {
  try {
    // An update into `spare` has not swapped yet: the new weights are there.
    write_slice_checkpoint(config_.checkpoint_dir, s.key, {0, s.index, s.offset, s.count}, s.total,
                           version, u.into_spare && !skipped ? s.spare : s.weights, s.momentum);
    if (cadence && version > 2 * config_.checkpoint_every)
      remove_slice_checkpoint(config_.checkpoint_dir, version - 2 * config_.checkpoint_every, s.key,
                              s.index);
  } catch (const Error& e) {
    PSRT_LOG_ERROR("checkpoint of key {} slice {} at version {} failed: {}", s.key, s.index,
                   version, e.what());
  }
}

void Server::finish_update(Update& u, std::uint64_t version, bool written) {
  Slice& s = *u.slice;
  {
    std::lock_guard lock(s.mu);
    publish_weights_locked(s, u, written);
    s.version = version;
    note_round_locked(s, u, version);
    for (std::size_t i = 0; i < u.ranks.size(); ++i) {
      auto w = s.workers.find(u.ranks[i]);
      if (w != s.workers.end()) w->second.applied++;
      if (u.grads[i].reusable() && s.free.size() < s.workers.size() + 2)
        s.free.push_back(std::move(u.grads[i]));
    }
    s.busy = false;
  }
  // A PUSH_IPC's gradient has been read: the worker may write it again.
  for (auto& g : u.grads) {
    const auto* ipc = std::get_if<IpcGrad>(&g.where);
    if (!ipc || !ipc->ack_peer) continue;
    Header ack;
    ack.type = MsgType::kPushAck;
    ack.request_id = ipc->ack_request;
    ipc->ack_peer->send(ack);
  }
  after_change(s);
}

kernels::SliceUpdate Server::slice_update(const Slice& s, const Update& u,
                                          const std::vector<const void*>& grads, float* weights,
                                          float* momentum, bool first_step) const {
  kernels::SliceUpdate k;
  k.weights = weights;
  k.momentum = momentum;
  k.grads = grads.data();
  k.num_grads = static_cast<int>(grads.size());
  k.dtype = to_grad_type(u.grads.front().dtype);
  k.count = s.count;
  k.grad_scale = config_.average ? 1.f / static_cast<float>(grads.size()) : 1.f;
  k.first_step = first_step;
  return k;
}

void Server::trace(const Update& u, std::uint64_t version, const kernels::StepResult* step) {
  if (!trace_) return;
  std::string ranks, clocks;
  for (std::size_t i = 0; i < u.ranks.size(); ++i) {
    ranks += fmt::format("{}{}", i ? "," : "", u.ranks[i]);
    clocks += fmt::format("{}{}", i ? "," : "", u.clocks[i]);
  }
  // The guard's and clipping's outcome, when the config asked for them. JSON has no NaN or
  // infinity, so a non-finite norm is written as null.
  std::string guard;
  if (step) {
    guard = std::isfinite(step->grad_norm) ? fmt::format(",\"grad_norm\":{}", step->grad_norm)
                                           : std::string(",\"grad_norm\":null");
    if (step->clipped) guard += fmt::format(",\"clip_coef\":{}", step->clip_coef);
    if (step->skipped) guard += ",\"skipped\":true";
  }
  // The update wrote the spare buffer: replies of the previous version were still sending.
  if (u.into_spare) guard += ",\"into_spare\":true";
  std::lock_guard lock(trace_mu_);
  std::fprintf(trace_,
               "{\"key\":%llu,\"slice\":%u,\"version\":%llu,\"ranks\":[%s],\"clocks\":[%s],"
               "\"slowest\":%llu%s}\n",
               static_cast<unsigned long long>(u.slice->key), u.slice->index,
               static_cast<unsigned long long>(version), ranks.c_str(), clocks.c_str(),
               static_cast<unsigned long long>(u.slowest), guard.c_str());
  std::fflush(trace_);
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
    arrived_locked(*in.slice);
  }
  replica_peer_closed(peer, why);
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
