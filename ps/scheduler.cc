#include "ps/scheduler.h"

#include <fmt/core.h>

#include <algorithm>

#include "base/exception_status.h"
#include "base/log.h"
#include "ps/checkpoint.h"
#include "ps/manifest_writer.h"
#include "ps/session/auth.h"
#include "transport/byte_streams.h"
#include "transport/factory.h"

namespace psrt::ps {

using ps::Header;
using ps::MsgType;
using Lock = std::unique_lock<std::mutex>;

Scheduler::Scheduler(SchedulerConfig config)
    : config_(std::move(config)),
      shards_(config_.num_servers,
              ps::job_cut(config_.partition_bytes, config_.balanced_cut, config_.num_servers,
                          transport::moves_as_byte_streams(config_.transport))) {
  if (config_.num_workers == 0)
    throw Error(ErrorCode::kInvalidArgument, "a job needs at least 1 worker");
  if (config_.replicas < 1 || config_.replicas > 2 ||
      (config_.replicas == 2 && config_.num_servers < 2))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--replicas {} with {} servers: replicas is 1 or 2, and 2 needs at "
                            "least 2 servers",
                            config_.replicas, config_.num_servers));
  servers_.resize(config_.num_servers);
  server_addresses_.resize(config_.num_servers);
  server_credentials_.resize(config_.num_servers);
  for (std::uint32_t i = 0; i < config_.num_servers; ++i) {
    live_servers_.insert(i);
    owner_.push_back(i);
    routed_.push_back(i);
  }
  if (!config_.checkpoint_dir.empty()) ps::check_checkpoint_dir(config_.checkpoint_dir);
  if (!config_.checkpoint_dir.empty() && ps::read_manifest(config_.checkpoint_dir, shards_)) {
    const ps::ResumePoint point = ps::find_resume_round(config_.checkpoint_dir, shards_);
    for (const auto& skipped : point.skipped)
      PSRT_LOG_WARN("checkpoint round {} in {} skipped: {}", skipped.round, config_.checkpoint_dir,
                    skipped.why);
    // This job writes those rounds again; a crash half-way must not leave a round that mixes
    // its files with the skipped ones.
    for (const auto& moved : ps::set_aside_rounds(config_.checkpoint_dir, point.skipped))
      PSRT_LOG_WARN("skipped round moved to {} (delete it once it is not needed)", moved);
    resume_round_ = point.round;
    if (resume_round_ > 0)
      PSRT_LOG_INFO("resuming from checkpoint round {} in {}", resume_round_,
                    config_.checkpoint_dir);
    else if (!point.skipped.empty())
      PSRT_LOG_WARN("no complete checkpoint round in {}: the job starts afresh",
                    config_.checkpoint_dir);
  }
  if (!config_.checkpoint_dir.empty())
    manifest_ = std::make_unique<ps::ManifestWriter>(
        config_.checkpoint_dir, shards_, [this](const Status& why) {
          Lock lock(mu_);
          auto msg = fmt::format("{}; stopping the job (its checkpoints could not be resumed)",
                                 why.message());
          PSRT_LOG_ERROR("{}", msg);
          finish_locked(Status(why.code(), msg));
        });
  // The scheduler takes no data payloads: its limits follow from the job's largest slice, like a
  // server's, not the transport's 2 GiB default.
  ps::Limits limits;
  limits.max_data_bytes = config_.partition_bytes;
  endpoint_ = std::make_shared<ps::Endpoint>(config_.secret, ps::Role::kScheduler, limits,
                                             config_.admission);
  endpoint_->set_handler(this);
  transport::Options topts;
  if (config_.secure) topts.secure_secret = config_.secret;
  topts.bootstrap_secret = config_.secret;
  topts.max_payload_bytes = config_.partition_bytes + ps::kMaxControlBytes;
  topts.accept_timeout = config_.admission.handshake_timeout;
  transport_ = transport::create_transport(config_.transport, endpoint_, topts);
  address_ = transport_->listen(config_.listen);
  monitor_ = std::thread([this] {
    try {
      monitor();
    } catch (...) {
      // Without its monitor the job would hang on a dead peer: stop it, naming why.
      const Status why = current_exception_status("the scheduler's liveness monitor failed");
      PSRT_LOG_ERROR("{}", why.message());
      Lock lock(mu_);
      finish_locked(why);
    }
  });
}

Scheduler::~Scheduler() {
  {
    Lock lock(mu_);
    if (!finished_) finish_locked(Status(ErrorCode::kCancelled, "the scheduler was stopped"));
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  manifest_.reset();  // writes what is pending
  // Give the SHUTDOWN messages a moment to leave before the connections close.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  transport_->shutdown();
}

Status Scheduler::wait(std::chrono::milliseconds timeout) {
  Lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return finished_; }))
    return Status(ErrorCode::kTimeout, "the job is still running");
  return result_;
}

void Scheduler::stop(const Status& why) {
  Lock lock(mu_);
  finish_locked(why);
}

void Scheduler::on_peer_ready(ps::Peer&) {}

MutableBuffer Scheduler::place(ps::Peer&, const Header& h, std::size_t, std::uint64_t) {
  throw Error(ErrorCode::kProtocol,
              fmt::format("the scheduler does not accept {}", ps::to_string(h.type)));
}

bool Scheduler::charge_control(ps::Peer& peer) {
  Lock lock(mu_);
  Quota& q = quotas_[peer.id()];
  const auto now = std::chrono::steady_clock::now();
  const double rate = config_.max_control_per_sec;
  if (q.tokens < 0) {
    q.tokens = rate;
  } else {
    q.tokens =
        std::min(rate, q.tokens + rate * std::chrono::duration<double>(now - q.refilled).count());
  }
  q.refilled = now;
  if (q.tokens >= 1) {
    q.tokens -= 1;
    return true;
  }
  lock.unlock();
  peer.send_error(0, ErrorCode::kInvalidArgument,
                  fmt::format("{} sent more than {} control messages a second to the scheduler "
                              "(PSRT_MAX_CONTROL_PER_SEC); disconnecting it",
                              peer.name(), config_.max_control_per_sec),
                  true);
  return false;
}

void Scheduler::on_message(ps::Peer& peer, const Header& h, std::span<const std::byte> payload,
                           const transport::Placement&) {
  // A server's PLACEMENT is not charged: workers' INITs cause it, at most one per slice they
  // may store (their quotas), and a server disconnected for them would stop the job.
  if (h.type == MsgType::kPlacement) return on_placement(peer, h);
  if (!charge_control(peer)) return;
  switch (h.type) {
    case MsgType::kRegister:
      return on_register(peer, h, payload);
    case MsgType::kLocate:
      return on_locate(peer, h);
    case MsgType::kHeartbeat:
      return;
    case MsgType::kMetrics:
      return on_metrics(peer, payload);
    case MsgType::kTimeline:
      return on_timeline(peer, h, payload);
    case MsgType::kClock:
      return on_clock(peer, h);
    case MsgType::kMembershipAck:
    case MsgType::kReplicaSetAck:
    case MsgType::kError:
      requests_.complete(peer, h, payload);
      return;
    default:
      break;
  }
  if (peer.role() != ps::Role::kWorker)
    throw Error(ErrorCode::kProtocol,
                fmt::format("{} from a {}", ps::to_string(h.type), ps::to_string(peer.role())));
  Lock lock(mu_);
  const std::uint32_t rank = peer.rank();
  auto it = workers_.find(rank);
  if (it == workers_.end() || it->second.get() != &peer)
    return peer.send_error(
        h.request_id, ErrorCode::kInvalidArgument,
        fmt::format("{} from a worker that is not a member of the job", ps::to_string(h.type)),
        false);
  if (h.type == MsgType::kUnregister) {
    workers_.erase(it);
    credentials_.erase(rank);
    barrier_arrived_.erase(rank);
    PSRT_LOG_INFO("worker {} left the job; {} workers remain", rank, workers_.size());
    note_metrics_locked("worker_left");
    if (workers_.empty()) log_shard_load_locked();  // a job that never met at a barrier
    Waiting w{peer.shared_from_this(), h.request_id};
    change_members_locked([this, w] {
      Header r;
      r.type = MsgType::kUnregisterReply;
      r.request_id = w.request_id;
      w.peer->send(r);
      if (workers_.empty() && changes_.empty()) finish_locked(Status());
    });
    check_barrier_locked();
  } else if (h.type == MsgType::kBarrier) {
    barrier_arrived_.insert(rank);
    barrier_waiting_.push_back({peer.shared_from_this(), h.request_id});
    check_barrier_locked();
  } else {
    peer.send_error(h.request_id, ErrorCode::kProtocol,
                    fmt::format("the scheduler does not accept {}", ps::to_string(h.type)), true);
  }
}

bool Scheduler::registered_locked(const ps::Peer& peer) const {
  for (const auto& s : servers_)
    if (s.get() == &peer) return true;
  for (const auto& [r, w] : workers_)
    if (w.get() == &peer) return true;
  for (const auto& [w, r] : pending_workers_)
    if (w.peer.get() == &peer) return true;
  return false;
}

void Scheduler::on_register(ps::Peer& peer, const Header& h, std::span<const std::byte> payload) {
  Lock lock(mu_);
  if (finished_) return peer.send_error(h.request_id, ErrorCode::kCancelled, "the job ended", true);
  if (registered_locked(peer))
    return peer.send_error(
        h.request_id, ErrorCode::kProtocol,
        fmt::format("{} sent REGISTER twice: one registration per connection", peer.name()), true);
  if (peer.role() == ps::Role::kServer) {
    std::vector<std::string> address;
    if (Status s = ps::decode_lines(payload, address); !s.ok() || address.size() != 1)
      return peer.send_error(h.request_id, ErrorCode::kProtocol,
                             "REGISTER of a server without its address", true);
    const std::uint32_t rank = h.rank();
    if (rank >= config_.num_servers || servers_[rank])
      return peer.send_error(
          h.request_id, ErrorCode::kInvalidArgument,
          fmt::format("server rank {} is out of range or taken (the job has {} servers)", rank,
                      config_.num_servers),
          true);
    const ps::Credential credential = ps::random_credential();  // throws before any change
    peer.set_rank(rank);
    servers_[rank] = peer.shared_from_this();
    server_addresses_[rank] = address[0];
    server_credentials_[rank] = credential;
    Header r;
    r.type = MsgType::kRegisterReply;
    r.request_id = h.request_id;
    r.set_assigned_rank(rank);
    r.round = resume_round_;
    ps::set_credential(r, credential);  // proven to the server it replicates to
    peer.send(r);
    PSRT_LOG_INFO("server {} registered at {}", rank, address[0]);
    return admit_pending_locked();
  }
  Waiting w{peer.shared_from_this(), h.request_id};
  if (h.rank() != ps::kAnyRank && h.rank() >= ps::kMaxRanks)
    return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                           fmt::format("worker rank {} is above the limit of {}: ask for a "
                                       "lower rank or for any rank",
                                       h.rank(), ps::kMaxRanks - 1),
                           true);
  if (!rendezvous_done_) {
    pending_workers_.emplace_back(w, h.rank());
    return admit_pending_locked();
  }
  // A worker joining a running job: a rank never used before unless it asks for a free one.
  std::uint32_t rank = h.rank();
  if (rank == ps::kAnyRank || workers_.count(rank)) rank = next_rank_;
  if (rank >= ps::kMaxRanks)
    return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                           fmt::format("the job has handed out every worker rank below {}: no "
                                       "rank left for a new worker",
                                       ps::kMaxRanks),
                           true);
  const ps::Credential credential = ps::random_credential();  // throws before any change
  next_rank_ = std::max(next_rank_, rank + 1);
  peer.set_rank(rank);
  workers_[rank] = w.peer;
  credentials_[rank] = credential;
  PSRT_LOG_INFO("worker {} joined the running job; {} workers", rank, workers_.size());
  note_metrics_locked("worker_joined");
  change_members_locked([this, w, rank] { reply_register(w, rank, /*joined=*/true); });
}

void Scheduler::admit_pending_locked() {
  if (rendezvous_done_ || pending_workers_.size() < config_.num_workers) return;
  if (std::any_of(servers_.begin(), servers_.end(), [](const auto& s) { return !s; })) return;
  std::vector<ps::Credential> credentials;  // drawn first: a failure changes nothing
  for (std::size_t i = 0; i < pending_workers_.size(); ++i)
    credentials.push_back(ps::random_credential());
  rendezvous_done_ = true;
  // Wanted ranks first (when unique and in range), then the lowest free ones.
  std::set<std::uint32_t> taken;
  std::vector<std::uint32_t> ranks(pending_workers_.size(), ps::kAnyRank);
  for (std::size_t i = 0; i < pending_workers_.size(); ++i) {
    auto want = pending_workers_[i].second;
    if (want < config_.num_workers && taken.insert(want).second) ranks[i] = want;
  }
  std::uint32_t next = 0;
  for (auto& r : ranks) {
    if (r != ps::kAnyRank) continue;
    while (taken.count(next))
      ++next;
    r = next;
    taken.insert(next);
  }
  std::vector<std::pair<Waiting, std::uint32_t>> admitted;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    auto& w = pending_workers_[i].first;
    w.peer->set_rank(ranks[i]);
    workers_[ranks[i]] = w.peer;
    credentials_[ranks[i]] = credentials[i];
    next_rank_ = std::max(next_rank_, ranks[i] + 1);
    admitted.emplace_back(w, ranks[i]);
  }
  pending_workers_.clear();
  PSRT_LOG_INFO("rendezvous complete: {} servers, {} workers", servers_.size(), workers_.size());
  auto admit = [this, admitted] {
    change_members_locked([this, admitted] {
      for (const auto& [w, rank] : admitted)
        reply_register(w, rank);
    });
  };
  // With replicas, every server reaches its backup before any worker may send it anything.
  if (config_.replicas > 1)
    queue_change_locked([this] { configure_replicas_locked(ps::kAnyRank, ps::kAnyRank, [] {}); });
  admit();
}

void Scheduler::reply_register(const Waiting& w, std::uint32_t rank, bool joined) {
  Header r;
  r.type = MsgType::kRegisterReply;
  r.request_id = w.request_id;
  r.set_assigned_rank(rank);
  r.set_live_workers(static_cast<std::uint32_t>(workers_.size()));
  r.round = resume_round_;
  r.total = config_.replicas;
  r.count = joined ? 1 : 0;  // the worker skips the start-up barriers (docs/elastic.md)
  if (auto c = credentials_.find(rank); c != credentials_.end()) ps::set_credential(r, c->second);
  w.peer->send_bytes(r, ps::encode_lines(server_addresses_));
}

void Scheduler::on_locate(ps::Peer& peer, const Header& h) {
  Lock lock(mu_);
  // Only the job's workers place and look up keys: anyone else holding the secret would grow
  // the shard map (and the MANIFEST) at will.
  if (auto it = workers_.find(peer.rank());
      peer.role() != ps::Role::kWorker || it == workers_.end() || it->second.get() != &peer)
    return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                           fmt::format("LOCATE from {}, which is not a registered worker of the "
                                       "job: register first",
                                       peer.name()),
                           false);
  const std::vector<ps::SliceRecord>* slices = shards_.find(h.key);
  if (!slices && h.total == 0)
    return peer.send_error(h.request_id, ErrorCode::kNotFound,
                           fmt::format("unknown key {}: no worker has called init() for it", h.key),
                           false);
  try {
    if (!slices) {
      // A new key: within this worker's quotas (a slice table costs the scheduler up to 1 MiB
      // and, with checkpoints, a MANIFEST rewrite).
      Quota& q = quotas_[peer.id()];
      // 0 for a key that cannot be cut: ShardMap::place refuses it below, naming why.
      const std::uint64_t n = ps::slice_count(h.total, shards_.cut());
      if (q.keys >= config_.max_keys_per_worker)
        return peer.send_error(
            h.request_id, ErrorCode::kInvalidArgument,
            fmt::format("{} already placed {} new keys, the most one worker may "
                        "(PSRT_MAX_KEYS_PER_WORKER={}); raise it if the model has more tensors",
                        peer.name(), q.keys, config_.max_keys_per_worker),
            false);
      if (n > config_.max_slices_per_worker - std::min(q.slices, config_.max_slices_per_worker))
        return peer.send_error(
            h.request_id, ErrorCode::kInvalidArgument,
            fmt::format("key {} of {} elements needs {} slices, beyond the {} new slices one "
                        "worker may place ({} placed; PSRT_MAX_SLICES_PER_WORKER); raise it or "
                        "--partition-bytes",
                        h.key, h.total, n, config_.max_slices_per_worker, q.slices),
            false);
    }
    if (!slices || h.total != 0) {
      const bool fresh = slices == nullptr;
      slices = &shards_.place(h.key, h.total);
      if (fresh) {
        Quota& q = quotas_[peer.id()];
        ++q.keys;
        q.slices += slices->size();
      }
      if (fresh && manifest_) manifest_->add(h.key, h.total, *slices);  // written in a batch
    }
  } catch (const Error& e) {
    return peer.send_error(h.request_id, e.code(), e.what(), false);
  }
  Header r;
  r.type = MsgType::kLocateReply;
  r.request_id = h.request_id;
  r.key = h.key;
  r.total = shards_.total(h.key);
  r.count = slices->size();
  peer.send_bytes(r, ps::encode_slices(*slices));
}

void Scheduler::change_members_locked(std::function<void()> then) {
  queue_change_locked([this, then = std::move(then)] { broadcast_members_locked(then); });
  note_metrics_locked(nullptr);
}

void Scheduler::queue_change_locked(std::function<void()> start) {
  changes_.push_back(std::move(start));
  if (!change_running_) start_next_change_locked();
}

void Scheduler::start_next_change_locked() {
  if (changes_.empty() || finished_) {
    change_running_ = false;
    return;
  }
  change_running_ = true;
  auto start = std::move(changes_.front());
  changes_.pop_front();
  start();
}

void Scheduler::broadcast_members_locked(const std::function<void()>& then) {
  std::vector<ps::MemberRecord> members;
  for (const auto& [r, p] : workers_)
    members.push_back({r, credentials_.at(r)});
  auto body = ps::encode_members(members);
  auto remaining = std::make_shared<std::size_t>(live_servers_.size());
  for (const std::uint32_t live : live_servers_) {
    auto on_ack = [this, remaining, then, live](const Status& acked, const Header&,
                                                std::span<const std::byte>) {
      Lock lock(mu_);
      // A server that refused the change (or could not be told) holds another member set than
      // the rest of the job: rounds would mix or wait forever. The job stops, naming it. One
      // lost meanwhile (replicas) is the replica change's to handle.
      if (!acked.ok() && !finished_ && live_servers_.count(live)) {
        auto msg = fmt::format("a membership change failed: {}; stopping the job", acked.message());
        PSRT_LOG_ERROR("{}", msg);
        finish_locked(Status(acked.code(), msg));
      }
      if (--*remaining > 0) return;
      if (!finished_) then();
      start_next_change_locked();
    };
    auto& server = servers_[live];
    Header m;
    m.type = MsgType::kMembership;
    m.count = members.size();
    m.request_id = requests_.add(*server, "MEMBERSHIP", on_ack);
    const auto id = m.request_id;
    server->send_bytes(m, body, [this, id](const Status& s) {
      if (!s.ok()) requests_.fail(id, s);
    });
  }
}

void Scheduler::check_barrier_locked() {
  if (barrier_waiting_.empty()) return;
  for (const auto& [rank, p] : workers_)
    if (!barrier_arrived_.count(rank)) return;
  auto reply = [waiting = std::move(barrier_waiting_)] {
    for (const auto& w : waiting) {
      Header r;
      r.type = MsgType::kBarrierReply;
      r.request_id = w.request_id;
      w.peer->send(r);
    }
  };
  barrier_waiting_.clear();
  // The keys placed before a barrier are in the MANIFEST before anyone passes it.
  if (manifest_)
    manifest_->after_written(std::move(reply));
  else
    reply();
  barrier_arrived_.clear();
  // Workers place their keys before their first barrier: say where the bytes went.
  log_shard_load_locked();
}

void Scheduler::log_shard_load_locked() {
  if (shards_.keys().size() == logged_keys_) return;
  logged_keys_ = shards_.keys().size();
  PSRT_LOG_INFO("{}", ps::describe_load(shards_));
}

void Scheduler::lose_worker_locked(std::uint32_t rank, const std::string& why) {
  // A worker that vanished without unregistering took gradients of unfinished rounds with it;
  // going on would silently train on a different problem. The job stops, naming it
  // (docs/ARCHITECTURE.md, "Failures stop the job"). A worker that leaves on purpose unregisters:
  // shutdown(), or its process ending normally (ps/worker_exit.h). --on-worker-loss continue asks
  // for the other choice: the worker is dropped as if it had left, and the rounds go on with the
  // live workers.
  auto it = workers_.find(rank);
  if (it == workers_.end()) return;
  const std::string name = it->second->name();
  workers_.erase(it);
  credentials_.erase(rank);
  note_metrics_locked("worker_lost");
  if (config_.worker_loss == SchedulerConfig::WorkerLoss::kContinue && !workers_.empty()) {
    barrier_arrived_.erase(rank);
    PSRT_LOG_WARN("{} lost: {}; the job goes on with {} workers (--on-worker-loss continue)", name,
                  why, workers_.size());
    change_members_locked([this] {
      if (workers_.empty() && changes_.empty()) finish_locked(Status());
    });
    return check_barrier_locked();
  }
  auto msg = config_.worker_loss == SchedulerConfig::WorkerLoss::kContinue
                 ? fmt::format("{} lost: {}; stopping the job: it was the last worker", name, why)
                 : fmt::format(
                       "{} lost: {}; stopping the job (it vanished without leaving: killed, "
                       "crashed or its host lost; run with --on-worker-loss continue to go on "
                       "without it)",
                       name, why);
  PSRT_LOG_ERROR("{}", msg);
  finish_locked(Status(ErrorCode::kPeerFailed, msg));
}

void Scheduler::on_peer_closed(ps::Peer& peer, const Status& why) {
  {
    Lock lock(mu_);
    peer_lost_locked(peer, why);
  }
  // After the loss is handled: a request it leaves unanswered (a REPLICA_SET, a MEMBERSHIP) fails
  // knowing that the server is lost.
  requests_.fail_peer(peer, why);
}

void Scheduler::peer_lost_locked(ps::Peer& peer, const Status& why) {
  quotas_.erase(peer.id());
  if (finished_) return;
  std::string reason = why.message();
  if (auto it = lost_why_.find(peer.id()); it != lost_why_.end()) reason = it->second;
  if (peer.role() == ps::Role::kServer) {
    if (peer.rank() < servers_.size() && servers_[peer.rank()].get() == &peer) {
      note_metrics_locked("server_lost");
      if (lose_server_locked(peer.rank(), reason)) return;
      auto msg = fmt::format("{} lost: {}; stopping the job", peer.name(), reason);
      PSRT_LOG_ERROR("{}", msg);
      finish_locked(Status(ErrorCode::kPeerFailed, msg));
    }
    return;
  }
  std::erase_if(pending_workers_, [&](const auto& p) { return p.first.peer.get() == &peer; });
  auto it = workers_.find(peer.rank());
  if (it != workers_.end() && it->second.get() == &peer) lose_worker_locked(peer.rank(), reason);
}

void Scheduler::finish_locked(const Status& why) {
  if (finished_) return;
  finished_ = true;
  result_ = why;
  Header h;
  h.type = MsgType::kShutdown;
  h.set_error_code(why.code());
  const auto& text = why.message();
  auto bytes = ps::as_bytes(text);
  for (auto& s : servers_)
    if (s) s->send_bytes(h, {bytes.begin(), bytes.end()});
  for (auto& [r, w] : workers_)
    w->send_bytes(h, {bytes.begin(), bytes.end()});
  for (auto& [w, r] : pending_workers_)
    w.peer->send_bytes(h, {bytes.begin(), bytes.end()});
  cv_.notify_all();
}

void Scheduler::monitor() {
  constexpr auto kTick = std::chrono::milliseconds(200);
  auto started = std::chrono::steady_clock::now();
  // Peers are judged only from `resumed`: a tick that comes much later than asked means this
  // process did not run meanwhile (SIGSTOP, a suspended VM), and the peers' messages of that time
  // are still unread in the sockets.
  auto resumed = started;
  auto last_tick = started;
  Lock lock(mu_);
  while (!cv_.wait_for(lock, kTick, [this] { return finished_; })) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_tick > kTick + std::min<std::chrono::steady_clock::duration>(
                                      config_.heartbeat_timeout / 2, std::chrono::seconds(1))) {
      PSRT_LOG_WARN(
          "the scheduler did not run for {} ms; every peer gets a fresh {} ms before "
          "it is declared lost",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick).count(),
          config_.heartbeat_timeout.count());
      started += now - last_tick;  // nor does the rendezvous deadline count the pause
      resumed = now;
    }
    last_tick = now;
    if (!rendezvous_done_ && now - started > config_.rendezvous_timeout) {
      auto servers = std::count_if(servers_.begin(), servers_.end(), [](auto& s) { return !!s; });
      finish_locked(Status(
          ErrorCode::kTimeout,
          fmt::format("rendezvous timed out after {} ms: {} of {} servers and {} of {} workers "
                      "registered",
                      config_.rendezvous_timeout.count(), servers, servers_.size(),
                      pending_workers_.size(), config_.num_workers)));
      return;
    }
    std::vector<std::shared_ptr<ps::Peer>> silent;
    auto check = [&](const std::shared_ptr<ps::Peer>& p) {
      if (p && now - std::max(p->last_seen(), resumed) > config_.heartbeat_timeout)
        silent.push_back(p);
    };
    for (const std::uint32_t live : live_servers_)  // a lost one (replicas) is not judged again
      check(servers_[live]);
    for (auto& [r, w] : workers_)
      check(w);
    for (auto& p : silent) {
      lost_why_[p->id()] = fmt::format("no heartbeat for {} ms (PSRT_PEER_TIMEOUT_MS)",
                                       config_.heartbeat_timeout.count());
      p->close();
    }
    note_own_counters_locked();
  }
}

}  // namespace psrt::ps
