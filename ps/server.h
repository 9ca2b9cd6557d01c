// One parameter server: holds the slices placed on it (weights, momentum, version, and a queue
// of received gradients per live worker; ps/server_slice.h), receives and admits pushes and
// pulls, hands each slice's next update to its update stage (ps/update_stage.h: chosen with the
// job's consistency policy, run on a compute pool, one fused pass per slice, kernels/), and
// answers pulls once the asking worker's own pushes are applied (read-your-writes; in sync mode
// that is "the round it pushed"). With replicas, its replica link (ps/replica_link.h) keeps the
// backup and the copies.
//
// Payloads land in place: a PUSH lands in a gradient buffer of the slice's free list; a PULL
// reply is sent from the weights themselves. On a cpu server a slice has a second weights buffer
// (`spare`): an update that finds replies still sending from `weights` reads them and writes
// the new version into `spare`, and the two swap when it is done, so an update waits only when
// replies send from both buffers (ps/update_stage.h; docs/ARCHITECTURE.md, "The pipeline").
//
// Threads (docs/ARCHITECTURE.md, "Threads"): the transport's progress thread runs the Handler
// entry points (place, on_message, on_peer_closed) and pull replies' completions; the update
// stage's compute pool runs updates; a cuda server's reply thread (Gpu) writes CUDA IPC pulls.
// Every field below says which mutex guards it or which thread owns it.
//
// Lock order: sgd_mu_ -> slices_mu_ -> {members_mu_, Slice::mu} -> the transport's own locks
// (a send); with replicas, ReplicaLink's link_mu_ comes before a send and its copies_mu_ is a
// leaf (ps/replica_link.h). members_mu_ and a Slice::mu are never held together; inflight_mu_,
// Placements::mu and UpdateStage's trace_mu_ are leaves (nothing is locked under them); no server
// lock is held while an update is handed to the pool or runs inline (UpdateStage::submit), or a
// job goes to the GPU reply thread.
// ThreadSanitizer (make test-sanitize, label tsan) checks the order on every run of
// tests/ps/server_scheduler_test.cc (it reports an inversion).
//
// The one access without a lock (an update writing a slice's weights): ps/server_slice.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "device/cuda_device.h"
#include "kernels/fused_sgd.h"
#include "ps/consistency.h"
#include "ps/replica_link.h"
#include "ps/server_slice.h"
#include "ps/session/endpoint.h"
#include "ps/update_stage.h"
#include "psrt/key_update.h"

namespace psrt::ps {

class BackupLog;  // ps/backup_log.h

// "an optimizer key", "an aggregate-only key (mean)", ... (ps/server_aggregate.cc)
std::string_view to_string(KeyUpdate u) noexcept;

struct ServerConfig {
  Mode mode = Mode::kSync;
  std::uint64_t staleness = 0;
  OptimizerConfig sgd;
  bool average = true;         // mean of the N gradients (false: their sum)
  std::string checkpoint_dir;  // empty: no checkpoints
  std::uint64_t checkpoint_every = 0;
  std::uint64_t resume_round = 0;  // load slices from this checkpoint round at INIT
  int threads = 1;                 // compute pool size (updates of different slices in parallel)
  std::uint64_t max_queued = 64;   // gradients one worker may have queued or arriving on a slice
  std::string trace_path;          // JSON line per applied update (tests and debugging)
  device::DeviceSpec device;       // where slices live and updates run (psrun --server-device)
  // The job's --partition-bytes: an INIT must be a slice of the shard map's cut of its key
  // (ps::slice_bounds). 0: not checked.
  std::size_t partition_bytes = 0;
  bool balanced_cut = false;  // the job's cut is the balanced one over num_servers
  std::string transport;      // the job's, for its cut (ps::job_cut)
  // The job's servers: an INIT the cut refuses is still taken when the checkpoint manifest
  // (written for this many servers) places the slice so.
  std::uint32_t num_servers = 0;
  // Per-worker quotas on what its INITs may store on this server (PSRT_MAX_KEYS_PER_WORKER,
  // PSRT_MAX_SLICES_PER_WORKER, as the scheduler's on LOCATE): a worker holding the secret
  // cannot grow a server past them by INITs of keys it never located. A backup's copies come
  // from its primary alone (ps/replica_link.h), so they are bounded by the same quotas.
  std::size_t max_keys_per_worker = 65'536;
  std::size_t max_slices_per_worker = std::size_t{1} << 20;
  // psrun --backup-workers (sync only): a round runs once all but this many live workers'
  // gradients arrived; a gradient for a round already applied is dropped (ps/server_backup.cc).
  std::uint32_t backup_workers = 0;
};

class Server final : public Handler, private UpdateStage::Owner, private ReplicaLink::Owner {
 public:
  explicit Server(ServerConfig config);
  ~Server() override;

  // The live workers (from the scheduler). Departed workers' queued gradients are dropped;
  // rounds waiting only on them run now.
  void set_members(const std::vector<std::uint32_t>& ranks);
  // Called for messages from the scheduler that the server process handles (SHUTDOWN). Set
  // before the transport delivers anything; runs on the progress thread or a pool thread.
  std::function<void(const Header&, std::span<const std::byte>)> on_control;
  // The checkpoint round to load slices from at INIT (from the scheduler's REGISTER reply).
  void set_resume_round(std::uint64_t round) { config_.resume_round = round; }
  // Stops the compute pool after the queued updates; idempotent.
  void stop();
  // Tells the server what its transport carries, before it receives anything: with a CUDA
  // server it picks how gradients reach the device and how pulls leave it, and logs that choice.
  // Returns the line it logged (empty for a cpu server).
  std::string set_transport(const transport::Transport& t);

  // Server replicas (psrun --replicas 2, ps/replica_link.h): this server replicates its
  // slices to the backup the scheduler names (REPLICA_SET) and keeps copies of other servers'
  // slices. Call before the transport delivers anything; `t` and the endpoint outlive the server.
  void enable_replicas(std::shared_ptr<Endpoint> endpoint, transport::Transport& t,
                       std::uint32_t self_rank, std::chrono::milliseconds connect_timeout);
  // Test hook (a trace point): runs on the replica connector thread when the work of a
  // REPLICA_SET begins (the lost server's rank, or kAnyRank), before it connects or sends
  // anything and before the scheduler hears back. Set before serving.
  std::function<void(std::uint32_t lost)> before_replicating;
  // Test hook (a trace point): runs on the thread handling it once the INITs that waited for a
  // PLACEMENT_REPLY were answered (stored, or refused), with that reply. Set before serving.
  std::function<void(const Header& reply)> after_placement;
  // Test hook (a trace point): runs once an INIT that no scheduler could confirm was refused
  // (this server lost the scheduler, or never had one), with the INIT and the ERROR sent.
  std::function<void(const Header& init, const Header& error)> after_init_refused;
  // A slice's state, for tests: as held here (a slice this server serves), or as this server's
  // copy of another server's slice (replicas). Empty when it has none.
  using SliceView = served::SliceView;
  std::optional<SliceView> held(std::uint64_t key, std::uint32_t index);
  std::optional<SliceView> copy(std::uint64_t key, std::uint32_t index);

  // A worker's HELLO rank must be a live member, and its AUTH must prove that member's
  // credential (from MEMBERSHIP). A server's must be this server's current primary (replicas),
  // proving the credential REPLICA_SET gave for it.
  std::optional<Credential> credential_for(Role role, std::uint32_t rank) override;
  MutableBuffer place(Peer& peer, const Header& h, std::size_t size, std::uint64_t cookie) override;
  void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                  const transport::Placement& placement) override;
  void on_peer_closed(Peer& peer, const Status& why) override;

 private:
  // The slice model (ps/server_slice.h).
  using HostGrad = served::HostGrad;
  using DeviceGrad = served::DeviceGrad;
  using StagedGrad = served::StagedGrad;
  using IpcGrad = served::IpcGrad;
  using GradBuf = served::GradBuf;
  using WorkerState = served::WorkerState;
  using PullWaiter = served::PullWaiter;
  using Slice = served::Slice;
  using Update = served::Update;
  struct InFlight {  // between place() and on_message(): in inflight_, under inflight_mu_
    Slice* slice = nullptr;
    GradBuf grad;
    std::vector<float> init;
  };

  // Placement (ps/server_placement.cc). An INIT of a slice this server does not hold is stored
  // only once the scheduler said that the shard map places that slice here (PLACEMENT): a worker
  // cannot store a key it never located, nor a second, divergent copy of a slice on a server the
  // map does not name. Meanwhile the INIT waits with its landed payload (counted by
  // charge_init); one question per slice and bounds is in flight.
  struct ParkedInit {
    std::shared_ptr<Peer> peer;
    Header h;
    InFlight in;
  };
  // (key, slice, offset, count, total) as an INIT names them.
  using SliceAsked =
      std::tuple<std::uint64_t, std::uint32_t, std::uint64_t, std::uint64_t, std::uint64_t>;
  struct Placements {
    std::mutex mu;                  // a leaf
    std::weak_ptr<Peer> scheduler;  // the peer MEMBERSHIP came from
    // Its connection closed (it declared this server lost, or it ended): nothing is asked any
    // more. False while this server never had a scheduler.
    bool lost = false;
    std::uint64_t next_id = 1;
    std::map<SliceAsked, std::vector<ParkedInit>> waiting;
    std::map<std::uint64_t, SliceAsked> asked;  // by PLACEMENT request id
  };
  // on_init() once the slice is held here or the scheduler placed it here; else refused.
  void init_if_placed(Peer& peer, const Header& h, InFlight in);
  void remember_scheduler(Peer& scheduler);
  // PLACEMENT_REPLY, or an ERROR answering a PLACEMENT (false: it answers something else).
  void on_placement_reply(const Header& h);
  // Refuses an INIT of a slice the map placed on this server (`self`) that server `now` serves
  // since the scheduler declared this one lost: ERROR with reroute(), so that the worker
  // re-sends it where the scheduler's ROUTE points.
  void refuse_moved_init(Peer& peer, const Header& init, std::uint32_t self, std::uint32_t now);
  // Refuses an INIT that no scheduler can confirm now. Once this server lost the scheduler
  // (`lost`) and runs with replicas, the ERROR carries reroute(): the scheduler may have declared
  // this server lost, and the worker re-sends the INIT where the ROUTE of this server points.
  void refuse_unconfirmed_init(Peer& peer, const Header& init, ErrorCode code,
                               const std::string& why, bool lost);
  bool on_placement_error(const Header& h, std::span<const std::byte> payload);
  // The scheduler was lost: the INITs waiting for its answer are refused.
  void placement_peer_closed(const Peer& peer);

  Slice* find(std::uint64_t key, std::uint32_t index);
  Slice& checked_slice(const Peer& peer, const Header& h);
  // Throws psrt::Error unless `peer` is a worker whose rank is still the registration it proved
  // (a rank that left and was given to a new worker is not the old connection's any more).
  void check_live_worker(const Peer& peer, const Header& h);
  // Counts a new slice INIT would store against its worker's quotas; throws psrt::Error past them.
  void charge_init(const Peer& peer, const Header& h);
  // Refuses an INIT that is not a slice of the shard map's cut of its key.
  void check_init_slice(const Header& h) const;
  void on_init(Peer& peer, const Header& h, InFlight& in);
  void on_set_optimizer(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // MEMBERSHIP from the scheduler: the live workers and their credentials, acknowledged.
  void on_membership(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_push(Peer& peer, const Header& h, InFlight& in);
  void on_pull(Peer& peer, const Header& h, Slice& s);
  // VERSION: replies at once with the slice's version (the updates applied to it), read under
  // its lock; unlike a pull it does not wait for the sender's pushes.
  void on_version(Peer& peer, const Header& h, Slice& s);
  // Optimizer state read and written by a worker (ps/server_state.cc). state_refusal: why `s`
  // cannot serve `h` (empty: it can).
  std::string state_refusal(const Slice& s, const Header& h) const;
  void on_optimizer_state(Peer& peer, const Header& h, Slice& s);
  void on_set_optimizer_state(Peer& peer, const Header& h, InFlight& in);
  // Under s.mu: stores part h.part() of a state of `cfg`; the refusal, or empty.
  std::string set_state_locked(Slice& s, const Header& h, const OptimizerConfig& cfg,
                               const std::vector<float>& values);
  // Under s.mu: refuses a push the slice cannot take now (not a member, too many queued, a
  // dtype other than the gradients queued or still arriving, a bad learning rate); returns its
  // learning rate.
  float admit_push_locked(Slice& s, const Header& h, std::uint32_t rank);
  // A push of worker `rank` placed by place() no longer arrives (it landed, or its connection
  // closed).
  static void arrived_locked(Slice& s, std::uint32_t rank);
  // Stops the whole job with `why` as a SHUTDOWN from the scheduler would (through on_control),
  // for what the server cannot go on from: a lost scheduler, an update it could not apply.
  void stop_job(const Status& why) override;

  // Under s.mu: pull waiters whose condition holds now; their readers are counted.
  std::vector<PullWaiter> ready_waiters_locked(Slice& s);
  void send_pull_replies(Slice& s, std::vector<PullWaiter> ready);
  // Aggregate-only keys (KeyUpdate::kMean/kSum, ps/server_aggregate.cc). Refuses an INIT of
  // such a key where the server cannot keep its contract (not sync, a cuda server).
  void check_aggregate_init(const Header& h) const;
  // The cuda server's parts (ps/server_device.cc).
  struct Gpu;
  void place_on_device(GradBuf& g, std::size_t size, transport::Placement& p);
  void after_receive_on_device(GradBuf& g);
  void init_on_device(Slice& s);
  kernels::StepResult update_on_device(Slice& s, Update& u, const OptimizerConfig& cfg,
                                       bool checkpoint_due) override;
  void on_device_info(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_ipc(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // Writes the weights into an IPC waiter's output and replies, on the GPU's reply thread (the
  // copy waits for the worker's event: never on a progress thread).
  void reply_ipc_pull(Slice& s, PullWaiter w);
  ConstBuffer pull_source(const Slice& s) const;
  void after_change(Slice& s) override;  // locks s: serves pulls and starts what may start
  // A pull reply no longer reads `source` (one of the slice's weight buffers; null: `weights`).
  void release_reader(Slice& s, const void* source = nullptr);

  // The update stage's and the replica link's view of the server (UpdateStage::Owner,
  // ReplicaLink::Owner; also after_change, stop_job, update_on_device, clock_locked and
  // note_round_locked).
  OptimizerConfig optimizer() override;
  std::vector<Slice*> slices() override;
  std::set<std::uint32_t> members() override;
  bool adopt(std::unique_ptr<Slice> s) override;

  // Backup workers (ps/server_backup.cc); each is a no-op without them, except that a new
  // worker state starts at the slice's next round.
  // Under s.mu: a new live worker of `s`, whose next push is for the slice's next round.
  static WorkerState& add_worker_locked(Slice& s, std::uint32_t rank);
  // Under s.mu: tags a gradient that just arrived with the round it is for.
  void tag_push_locked(WorkerState& w, GradBuf& g) const;
  // Under s.mu: drops every queued gradient for a round already applied (late: the round ran
  // without it), counting it as consumed so that its worker's pull is answered.
  void drop_late_locked(Slice& s);
  // Under s.mu: a pull reply to `w` starts now (its version is set): what it reports about
  // rounds and drops, and the round the worker's next push is for.
  void note_reply_locked(Slice& s, PullWaiter& w) const;
  // Under s.mu: the policy's view of worker `w` (`current`: its oldest gradient is for the
  // round the slice applies next).
  WorkerClock clock_locked(const Slice& s, std::uint32_t rank, const WorkerState& w) const override;
  // Under s.mu: update `u` made `version` of `s`: its gradient count (for pull replies), and
  // with backup workers the live workers it ran without, logged at a bounded rate and counted.
  void note_round_locked(Slice& s, const Update& u, std::uint64_t version) override;
  // With backup workers (config.backup_workers > 0): their log; refuses a mode other than sync.
  static std::unique_ptr<BackupLog> make_backup_log(const ServerConfig& config);

  // Constant after construction, except: config_.sgd (guarded by sgd_mu_) and
  // config_.resume_round (set_resume_round() and INIT: the progress thread only).
  ServerConfig config_;
  std::mutex sgd_mu_;
  bool sgd_set_by_worker_ = false;  // guarded by sgd_mu_

  // Slices are added (INIT) under the unique lock and never removed while the server runs: a
  // Slice* taken under the shared lock stays valid.
  std::shared_mutex slices_mu_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::unique_ptr<Slice>> slices_;
  std::mutex members_mu_;
  std::set<std::uint32_t> members_;                  // guarded by members_mu_
  std::map<std::uint32_t, Credential> credentials_;  // live worker → credential: members_mu_
  struct InitQuota {
    std::set<std::uint64_t> keys;  // keys it stored a slice of here
    std::size_t slices = 0;        // slices it stored (or is storing) here
  };
  std::map<std::uint32_t, InitQuota> init_quotas_;  // by worker rank: members_mu_

  Placements placements_;

  std::mutex inflight_mu_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, InFlight>
      inflight_;  // (peer, the endpoint's cookie of the message): inflight_mu_

  std::unique_ptr<Gpu> gpu_;  // null for a cpu server; set by the constructor, constant after

  // Null without replicas; set before serving (enable_replicas), constant after. Before stage_:
  // the stage's threads replicate through it.
  std::unique_ptr<ReplicaLink> link_;

  std::unique_ptr<BackupLog> backup_log_;  // with backup workers; constant after construction

  // The update stage: set by the constructor, constant after. Last: its compute pool's threads
  // use everything above.
  std::unique_ptr<UpdateStage> stage_;
};

}  // namespace psrt::ps
