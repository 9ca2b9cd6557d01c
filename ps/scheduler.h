// The scheduler: rendezvous, membership, key placement, barriers and failure detection.
//
// Rendezvous: servers register with their listen address; workers are held until S servers
// and the job's first N workers are in, then all get their ranks and the server list. Later
// workers join at once, and workers may unregister; every membership change reaches every
// server (and is acknowledged) before the worker that caused it gets its reply, so a server
// never sees a push from a worker it does not know.
//
// Identity: every worker registration gets a fresh random credential, sent to the worker in its
// REGISTER reply and to every server with the membership (ps/session/protocol.h); servers accept a
// worker's connection only for a live rank with its credential. The scheduler itself acts on a
// message only for the rank registered on the connection it came on, never a rank the message
// names, and takes one REGISTER per connection.
//
// Failures: a peer whose connection closes or that sends nothing for heartbeat_timeout is lost.
// A lost worker or server ends the job: everyone gets SHUTDOWN naming it, and pending
// operations fail with that message (workers that leave on purpose unregister, see
// Worker::shutdown). With SchedulerConfig::worker_loss = kContinue a lost worker is treated as
// one that left (the servers drop its queued gradients, rounds go on with the live workers),
// logged as lost; the job then fails only when it has lost every worker. The job ends normally when
// its last worker unregisters. Silence is measured only over time the scheduler itself ran: after a
// pause of its own (psrun stopped, the host suspended) every peer gets a fresh heartbeat_timeout
// from the moment it resumed.
//
// Ranks: worker ranks are below ps::kMaxRanks; a joiner asking for a higher one, or arriving
// when every rank below it was handed out, is refused with an ERROR naming the limit and the job
// goes on. A server that refuses a membership change (or cannot be sent one) stops the job with
// an error naming the server and its reason.
//
// Threads (docs/ARCHITECTURE.md, "Threads"): the transport's progress thread runs the Handler
// entry points and the completions of sends and requests; monitor_ checks liveness every 200
// ms; any thread may call wait() and stop(). One mutex, mu_, guards the job's state (every field
// below says so, or why it needs none). Lock order: mu_ -> Requests' own lock (requests_.add
// under mu_) -> the transport's locks (a send); a request's completion runs with the Requests
// lock released, so it may take mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "ps/shard_map.h"
#include "transport/transport.h"

namespace psrt::ps {

class JobMetrics;      // ps/job_metrics.h
class JobTimeline;     // ps/job_timeline.h
class ManifestWriter;  // ps/manifest_writer.h

struct SchedulerConfig {
  std::string transport = "tcp";
  std::string listen = "127.0.0.1:0";
  std::string secret;
  std::uint32_t num_servers = 1;
  std::uint32_t num_workers = 1;
  std::size_t partition_bytes = std::size_t{4} << 20;
  // PSRT_SHARDING=balanced (psrun without --partition-bytes): the balanced cut of ps/shard_map.h
  // over the job's servers, slices of at most partition_bytes; false: the fixed cut.
  bool balanced_cut = false;
  std::string checkpoint_dir;  // MANIFEST lives here; resume from its latest complete round
  std::chrono::milliseconds heartbeat_timeout{10'000};
  // psrun --on-worker-loss (PSRT_ON_WORKER_LOSS): what a lost worker does to the job.
  enum class WorkerLoss { kStop, kContinue } worker_loss = WorkerLoss::kStop;
  std::chrono::milliseconds rendezvous_timeout{120'000};
  bool secure = false;  // psrun --secure: every message sealed with keys from the secret
  // Admission of connections not yet authenticated (PSRT_HANDSHAKE_TIMEOUT_MS, ...).
  ps::Admission admission;
  // Per-peer quotas (PSRT_MAX_KEYS_PER_WORKER, PSRT_MAX_SLICES_PER_WORKER,
  // PSRT_MAX_CONTROL_PER_SEC): new keys and their slices one worker may place, and the control
  // messages per second one peer may send (burst: one second's worth).
  std::size_t max_keys_per_worker = 65'536;
  std::size_t max_slices_per_worker = std::size_t{1} << 20;
  std::uint32_t max_control_per_sec = 100'000;
  // psrun --replicas: 1, or 2 (every slice also on a backup server, which takes over when its
  // server is lost; ps/scheduler_replicas.cc). 2 needs at least 2 servers.
  std::uint32_t replicas = 1;
};

class Scheduler final : public ps::Handler {
 public:
  explicit Scheduler(SchedulerConfig config);
  ~Scheduler() override;

  // The address processes connect to.
  const std::string& address() const { return address_; }
  std::uint64_t resume_round() const { return resume_round_; }

  // Blocks until the job ended (every worker left, or a failure) or `timeout`; returns how it
  // ended (ok, or the error naming the cause). kTimeout when still running.
  Status wait(std::chrono::milliseconds timeout);
  // Ends the job now: SHUTDOWN(why) to everyone. Idempotent.
  void stop(const Status& why);
  // Test hook: declares server `rank` lost as its connection closing does (replicas: its slices
  // go to its backup, REPLICA_SET, then ROUTE), but leaves its connection open: a server given
  // up on while its process still runs and answers. False where no loss is taken (no replicas,
  // before the rendezvous, not a live server, no server left to take over).
  bool lose_server_for_test(std::uint32_t rank);
  // Test hook: closes server `rank`'s connection as a missed heartbeat does (PSRT_PEER_TIMEOUT_MS):
  // the loss production takes, while the server's process still runs. False when `rank` is not
  // a registered server.
  bool close_server_for_test(std::uint32_t rank);
  // Test hook: runs under the scheduler's lock with each PLACEMENT (and the asking server's rank)
  // before it is answered; true drops the PLACEMENT_REPLY (the asker's INITs stay parked until
  // it loses the scheduler). Set before the servers start.
  std::function<bool(std::uint32_t server, const ps::Header& placement)> drop_placement_reply;

  // Live metrics (ps/scheduler_metrics.cc): METRICS reports and the scheduler's own counts
  // (members, membership events) go to `metrics`, TIMELINE reports to `timeline`. Set before
  // the processes start; null: off.
  void set_observers(std::shared_ptr<JobMetrics> metrics, std::shared_ptr<JobTimeline> timeline);

  void on_peer_ready(ps::Peer& peer) override;
  MutableBuffer place(ps::Peer& peer, const ps::Header& h, std::size_t size,
                      std::uint64_t cookie) override;
  void on_message(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload,
                  const transport::Placement& placement) override;
  void on_peer_closed(ps::Peer& peer, const Status& why) override;

 private:
  struct Waiting {
    std::shared_ptr<ps::Peer> peer;
    std::uint64_t request_id;
  };
  void on_register(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload);
  bool registered_locked(const ps::Peer& peer) const;
  void on_locate(ps::Peer& peer, const ps::Header& h);
  // PLACEMENT from a registered server (ps/scheduler_placement.cc): which server serves the
  // slice the header names now (the shard map's, through owner_), and which one the map placed
  // it on; kAnyRank when the map has no such slice (the key was never located, or is cut
  // otherwise).
  void on_placement(ps::Peer& peer, const ps::Header& h);
  std::uint32_t placed_server_locked(const ps::Header& h) const;
  // Takes one control message from `peer`'s token bucket; false (and the peer disconnected
  // with an ERROR naming PSRT_MAX_CONTROL_PER_SEC) when it is empty.
  bool charge_control(ps::Peer& peer);
  void admit_pending_locked();
  // `joined`: the worker joined the running job (after the rendezvous).
  void reply_register(const Waiting& w, std::uint32_t rank, bool joined = false);
  // Sends the live worker set to every server (a change, queued); `then` runs once all
  // acknowledged.
  void change_members_locked(std::function<void()> then);
  // Changes of what the servers hold (membership, replicas) go one at a time, in the order they
  // were asked for: `start` runs once every earlier change ended, and ends its own change with
  // start_next_change_locked() once every server acknowledged it.
  void queue_change_locked(std::function<void()> start);
  void start_next_change_locked();
  void broadcast_members_locked(const std::function<void()>& then);
  void check_barrier_locked();
  // Logs describe_load() of the shard map when keys were placed since it last did.
  void log_shard_load_locked();
  void lose_worker_locked(std::uint32_t rank, const std::string& why);
  // A closed connection: a lost server or worker (on_peer_closed, before its requests fail).
  void peer_lost_locked(ps::Peer& peer, const Status& why);
  // Server replicas (ps/scheduler_replicas.cc). The live server after `rank` in rank order
  // (wrapping), kAnyRank when there is none but it.
  std::uint32_t next_live_server_locked(std::uint32_t rank) const;
  // The live server that replicates to `rank` (whose next live server it is); kAnyRank: none.
  std::uint32_t primary_of_locked(std::uint32_t rank) const;
  // REPLICA_SET to every live server: each replicates to the next live one; server `lost`'s
  // slices are promoted on `promote_to` (kAnyRank: none). `then` runs once all acknowledged; a
  // server that cannot take it stops the job.
  void configure_replicas_locked(std::uint32_t lost, std::uint32_t promote_to,
                                 const std::function<void()>& then);
  // ROUTE to every worker for each lost server whose slices a live server serves now.
  void send_routes_locked();
  // With replicas, a lost server's slices move to its backup and the job goes on: true. False
  // when the job cannot go on without it (no replicas, before the rendezvous, no server left).
  bool lose_server_locked(std::uint32_t rank, const std::string& why);
  void finish_locked(const Status& why);
  void monitor();
  // Live metrics (ps/scheduler_metrics.cc): a METRICS report from a registered peer; the live
  // members and an event ("worker_lost", ...), counted when metrics are on.
  void on_metrics(ps::Peer& peer, std::span<const std::byte> payload);
  void on_timeline(ps::Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_clock(ps::Peer& peer, const Header& h);
  void note_metrics_locked(const char* event);
  // The scheduler's own transport counters into the job's metrics (every monitor tick).
  void note_own_counters_locked();

  // Set by the constructor, constant after.
  SchedulerConfig config_;
  std::shared_ptr<ps::Endpoint> endpoint_;
  std::unique_ptr<transport::Transport> transport_;
  std::string address_;
  ps::Requests requests_;  // thread-safe on its own
  // The checkpoint MANIFEST's writer thread (null without a checkpoint directory): thread-safe
  // on its own; destroyed before the transport shuts down (it may still answer a barrier).
  std::unique_ptr<ManifestWriter> manifest_;

  // Plain, not recursive: while the transport runs, no completion runs inside the send() that
  // caused it (transport/transport.h, "Threads"), so a completion that locks mu_ (a membership
  // ack, a failed send) never finds it held by its own thread; the transport is shut down only
  // in the destructor, after monitor_ joined and with mu_ free.
  std::mutex mu_;
  std::condition_variable cv_;  // finished_ became true
  // Guarded by mu_: everything from here to finished_/result_.
  std::vector<std::shared_ptr<ps::Peer>> servers_;
  std::vector<std::string> server_addresses_;
  // Each server registration's credential (ps/session/auth.h): given to that server alone in its
  // REGISTER reply, and to the server it replicates to in REPLICA_SET, which accepts a server's
  // connection only from its current primary proving it.
  std::vector<ps::Credential> server_credentials_;
  std::map<std::uint32_t, std::shared_ptr<ps::Peer>> workers_;      // live, by rank
  std::map<std::uint32_t, ps::Credential> credentials_;             // of the live workers
  std::vector<std::pair<Waiting, std::uint32_t>> pending_workers_;  // before rendezvous
  bool rendezvous_done_ = false;
  std::uint32_t next_rank_ = 0;
  std::set<std::uint32_t> used_ranks_;
  ps::ShardMap shards_;
  std::size_t logged_keys_ = 0;     // keys of the shard map when its load was last logged
  std::uint64_t resume_round_ = 0;  // set by the constructor, constant after (read unlocked)
  // Replicas: the servers not lost, and which live server serves the slices the shard map put
  // on each server (owner_[i] == i until server i is lost).
  std::set<std::uint32_t> live_servers_;
  std::vector<std::uint32_t> owner_;
  std::vector<std::uint32_t> routed_;  // owner_ as the workers were last told (send_routes_locked)
  std::map<std::uint64_t, std::string> lost_why_;  // peer id → reason it was closed
  // Per-peer quotas, by peer id (dropped when the peer closes).
  struct Quota {
    std::size_t keys = 0;
    std::size_t slices = 0;
    double tokens = -1;  // control messages left; < 0 = not started (a full bucket)
    std::chrono::steady_clock::time_point refilled{};
  };
  std::map<std::uint64_t, Quota> quotas_;
  // Changes go one at a time (queue_change_locked); each waits for every server's ack.
  std::deque<std::function<void()>> changes_;
  bool change_running_ = false;
  // Replicas: the live servers some of whose slices have no copy on another live server yet
  // (the one that took over a lost server's slices, the one that replicated to it), and why;
  // each leaves once it acknowledged a REPLICA_SET, which it does once its new backup holds a
  // copy of every slice. Losing one of them loses slices: the job stops, naming it.
  struct Unsettled {
    std::string why;
    std::uint64_t since = 0;  // server_losses_ when it became so: a change begun later settles it
  };
  std::map<std::uint32_t, Unsettled> unsettled_;
  std::uint64_t server_losses_ = 0;  // servers lost so far (replicas)
  // Replica changes for losses queued or running: the workers are routed to the servers that
  // took over once none is left (a server named earlier may not hold the slices yet).
  std::size_t loss_changes_ = 0;
  // Barrier.
  std::set<std::uint32_t> barrier_arrived_;
  std::vector<Waiting> barrier_waiting_;

  std::shared_ptr<JobMetrics> metrics_;    // null unless set_observers(); guarded by mu_
  std::shared_ptr<JobTimeline> timeline_;  // likewise

  bool finished_ = false;
  Status result_;
  std::thread monitor_;  // started by the constructor, joined by the destructor
};

}  // namespace psrt::ps
