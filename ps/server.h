// One parameter server: holds the slices placed on it (weights, momentum, version, and a queue
// of received gradients per live worker), decides with the job's consistency policy when an
// update runs, runs it on a compute pool (one fused pass per slice, kernels/), and answers
// pulls once the asking worker's own pushes are applied (read-your-writes; in sync mode that is
// "the round it pushed").
//
// Payloads land in place: a PUSH lands in a gradient buffer of the slice's free list; a PULL
// reply is sent from the weights themselves. On a cpu server a slice has a second weights buffer
// (`spare`): an update that finds replies still sending from `weights` reads them and writes
// the new version into `spare`, and the two swap when it is done, so an update waits only when
// replies send from both buffers (ps/server_pipeline.cc; docs/ARCHITECTURE.md, "The pipeline").
//
// Threads (docs/ARCHITECTURE.md, "Threads"): the transport's progress thread runs the Handler
// entry points (place, on_message, on_peer_closed) and pull replies' completions; the compute
// pool (pool_) runs updates; a cuda server's reply thread (Gpu) writes CUDA IPC pulls. Every
// field below says which mutex guards it or which thread owns it.
//
// Lock order: sgd_mu_ -> slices_mu_ -> {members_mu_, Slice::mu} -> the transport's own locks
// (a send); with replicas, Replica::link_mu comes before a send and Replica::copies_mu is a leaf
// (ps/server_replica.h). members_mu_ and a Slice::mu are never held together; inflight_mu_ and
// trace_mu_ are leaves (nothing is locked under them); no server lock is held while an update is
// handed to the pool or runs inline (run_inline), or a job goes to the GPU reply thread.
// ThreadSanitizer (make test-sanitize, label tsan) checks the order on every run of
// tests/unit/server_scheduler_test.cc (it reports an inversion).
//
// The one access without a lock: an update writes a slice's weights (or its spare buffer) and
// momentum without Slice::mu. It may because next_update_locked() marks the slice busy only when
// no pull reply reads the buffer it will write (readers == 0 for `weights`, spare_readers == 0
// for `spare`), and ready_waiters_locked() starts replies only from `weights`, and none while an
// update writes `weights` in place; run_update() asserts this on entry.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "base/work_queue.h"
#include "device/cuda_device.h"
#include "device/memory.h"
#include "kernels/fused_sgd.h"
#include "ps/consistency.h"
#include "ps/endpoint.h"
#include "psrt/key_update.h"

namespace psrt::ps {

struct ReplicaCount;  // ps/replica_protocol.h
class BackupLog;      // ps/backup_log.h

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
  std::uint64_t max_queued = 64;   // gradients one worker may have queued on one slice
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
  // from its primary alone (ps/server_replica.h), so they are bounded by the same quotas.
  std::size_t max_keys_per_worker = 65'536;
  std::size_t max_slices_per_worker = std::size_t{1} << 20;
  // psrun --backup-workers (sync only): a round runs once all but this many live workers'
  // gradients arrived; a gradient for a round already applied is dropped (ps/server_backup.cc).
  std::uint32_t backup_workers = 0;
};

class Server final : public Handler {
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

  // Server replicas (psrun --replicas 2, ps/server_replica.h): this server replicates its
  // slices to the backup the scheduler names (REPLICA_SET) and keeps copies of other servers'
  // slices. Call before the transport delivers anything; `t` and the endpoint outlive the server.
  void enable_replicas(std::shared_ptr<Endpoint> endpoint, transport::Transport& t,
                       std::uint32_t self_rank, std::chrono::milliseconds connect_timeout);
  // Test hook (a trace point): runs on the replica connector thread when the work of a
  // REPLICA_SET begins (the lost server's rank, or kAnyRank), before it connects or sends
  // anything and before the scheduler hears back. Set before serving.
  std::function<void(std::uint32_t lost)> before_replicating;
  // A slice's state, for tests: as held here (a slice this server serves), or as this server's
  // copy of another server's slice (replicas). Empty when it has none.
  struct SliceView {
    std::uint64_t version = 0;
    std::vector<float> weights, momentum;
  };
  std::optional<SliceView> held(std::uint64_t key, std::uint32_t index);
  std::optional<SliceView> copy(std::uint64_t key, std::uint32_t index);

  // A worker's HELLO rank must be a live member, and its AUTH must prove that member's
  // credential (from MEMBERSHIP). A server's must be this server's current primary (replicas),
  // proving the credential REPLICA_SET gave for it.
  std::optional<Credential> credential_for(Role role, std::uint32_t rank) override;
  transport::Placement place(Peer& peer, const Header& h, std::size_t size) override;
  void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                  const transport::Placement& placement) override;
  void on_peer_closed(Peer& peer, const Status& why) override;

 private:
  // One gradient, by where its bytes are: each storage mode holds exactly what it needs.
  struct HostGrad {  // cpu server: the payload lands here
    std::unique_ptr<std::byte[]> data;
  };
  struct DeviceGrad {  // cuda server, CUDA-capable transport: lands in the slot the kernel reads
    device::DeviceMemory dev;
  };
  struct StagedGrad {             // cuda server, host-only transport (path c):
    device::DeviceMemory dev;     // the receive slot the kernel reads,
    device::PinnedMemory pinned;  // where the payload lands first,
    device::Event copied;         // and the copy pinned -> dev, queued once it landed
  };
  // CUDA IPC: the gradient stays in the worker's GPU memory and is read there, after
  // `remote_event`; a PUSH_IPC is acked only once the update has read it.
  struct IpcGrad {
    const void* remote = nullptr;
    void* remote_event = nullptr;
    std::shared_ptr<void> hold;      // keeps the IPC mapping open until the update ran
    std::shared_ptr<Peer> ack_peer;  // PUSH_IPC: acked once read; null for PUSH_PULL_IPC
    std::uint64_t ack_request = 0;
  };
  struct GradBuf {
    // monostate: not placed yet (a free-list miss on a cuda server, before place_on_device).
    std::variant<std::monostate, HostGrad, DeviceGrad, StagedGrad, IpcGrad> where;
    std::size_t size = 0;
    WireType dtype = WireType::kF32;
    float lr = 0.f;           // this round's learning rate from the PUSH; 0 = the configured one
    std::uint64_t round = 0;  // backup workers: the round it was computed for (else unused)
    // Live metrics (ps/metric_hooks.h): when it was placed and when it had arrived; the epoch
    // when metrics are off.
    std::chrono::steady_clock::time_point placed{}, arrived{};
    // Storage the server owns, kept on the slice's free list for the next push (not IPC).
    bool reusable() const {
      return std::holds_alternative<HostGrad>(where) || std::holds_alternative<DeviceGrad>(where) ||
             std::holds_alternative<StagedGrad>(where);
    }
  };
  struct WorkerState {  // all fields: guarded by the slice's mu
    std::deque<GradBuf> queued;
    std::uint64_t applied = 0;
    std::uint64_t received = 0;
    // Backup workers: the round its next push is for (one after the version it last pulled),
    // and its pushes dropped as late since its last pull reply (sent with that reply).
    std::uint64_t next_round = 1;
    std::uint64_t dropped = 0;
  };
  struct PullWaiter {
    std::shared_ptr<Peer> peer;
    std::uint64_t request_id;
    std::uint32_t rank;
    std::uint64_t target;  // the worker's `applied` that must be reached
    void* out = nullptr;   // CUDA IPC: the worker's output, written here instead of sent
    void* out_event = nullptr;
    std::shared_ptr<void> out_hold{};
    // Set by ready_waiters_locked() when the reply may start: the weights it is sent from and
    // their version, taken together under the slice's lock (an update may swap the buffers
    // before the reply is sent).
    ConstBuffer source{};
    std::uint64_t version = 0;
    // The reply's Header::set_round_info, set with source (note_reply_locked).
    std::uint32_t round_workers = 0;
    std::uint64_t late_dropped = 0;
  };
  struct Slice {
    std::mutex mu;
    // Set before the slice is published in slices_, constant after.
    std::uint64_t key = 0, offset = 0, count = 0, total = 0;
    std::uint32_t index = 0;
    KeyUpdate update = KeyUpdate::kOptimizer;  // from the INIT that stored the slice
    // cpu server: the slice. cuda server: the slice is d_weights/d_momentum; `weights` and
    // `momentum` are filled for checkpoints only, and `mirror` (pinned) holds the weights staged
    // pulls are sent from, refreshed after every update.
    // Not guarded by mu: written only by the update that holds `busy` (no reader then), read by
    // pull replies counted in `readers` (no update then). See the header comment.
    std::vector<float> weights, momentum;
    device::DeviceMemory d_weights, d_momentum;
    device::PinnedMemory mirror;
    // The rest: guarded by mu.
    std::uint64_t version = 0;
    std::map<std::uint32_t, WorkerState> workers;  // live ranks
    std::vector<GradBuf> free;
    // Pushes admitted and placed whose payload is still arriving, and their dtype: a push of
    // another dtype is refused while any is, as while any gradient is queued.
    std::uint32_t arriving = 0;
    WireType arriving_dtype = WireType::kF32;
    bool busy = false;                // an update of this slice is queued or running
    std::uint32_t round_workers = 0;  // gradients in the update that made `version` (0: none)
    int readers = 0;                  // pull replies sending from the weights
    // cpu server: the second weights buffer (empty until an update first needs it) and the
    // replies still sending from it (they started from `weights` before a swap). The running
    // update writes `spare` instead of `weights` when into_spare is set. `spare`'s elements are
    // not guarded by mu, as `weights`' are not; the vector object and the counts are.
    std::vector<float> spare;
    int spare_readers = 0;
    bool into_spare = false;
    std::vector<PullWaiter> waiters;
  };
  struct Update {  // owned by the thread holding it (taken under the slice's mu)
    Slice* slice;
    bool into_spare = false;  // writes the new weights into slice->spare (then swaps)
    std::vector<std::uint32_t> ranks;
    std::vector<GradBuf> grads;
    std::uint64_t slowest;  // min clock over live workers before it, for the trace
    std::vector<std::uint64_t> clocks;
  };
  struct InFlight {  // between place() and on_message(): in inflight_, under inflight_mu_
    Slice* slice = nullptr;
    GradBuf grad;
    std::vector<float> init;
  };

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
  // A push placed by place() no longer arrives (it landed, or its connection closed).
  static void arrived_locked(Slice& s);
  // Stops the whole job with `why` as a SHUTDOWN from the scheduler would (through on_control),
  // for what the server cannot go on from: a lost scheduler, an update it could not apply.
  void stop_job(const Status& why);
  // Why the gradients of `u` cannot be read as one dtype of s.count elements; empty when they
  // can. The last line of defence behind admit_push_locked.
  static std::string bad_grads(const Slice& s, const Update& u);

  // Under s.mu: starts the next update if the policy allows one; returns it for the pool.
  std::optional<Update> next_update_locked(Slice& s);
  // Under s.mu: pull waiters whose condition holds now; their readers are counted.
  std::vector<PullWaiter> ready_waiters_locked(Slice& s);
  void send_pull_replies(Slice& s, std::vector<PullWaiter> ready);
  void submit(Update u);
  void run_update(Update& u);
  // The kernels' view of an update of `s` with these buffers (host or device).
  kernels::SliceUpdate slice_update(const Slice& s, const Update& u,
                                    const std::vector<const void*>& grads, float* weights,
                                    float* momentum, bool first_step) const;
  // Aggregate-only keys (KeyUpdate::kMean/kSum, ps/server_aggregate.cc). Refuses an INIT of
  // such a key where the server cannot keep its contract (not sync, a cuda server).
  void check_aggregate_init(const Header& h) const;
  // The update of an aggregate-only slice: its new value is the round's mean (or sum).
  kernels::StepResult aggregate_only(Slice& s, const Update& u);
  // The cuda server's parts (ps/server_device.cc).
  struct Gpu;
  void place_on_device(GradBuf& g, std::size_t size, transport::Placement& p);
  void after_receive_on_device(GradBuf& g);
  void init_on_device(Slice& s);
  kernels::StepResult update_on_device(Slice& s, Update& u, const OptimizerConfig& cfg,
                                       bool checkpoint_due);
  void on_device_info(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_ipc(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // Writes the weights into an IPC waiter's output and replies, on the GPU's reply thread (the
  // copy waits for the worker's event: never on a progress thread).
  void reply_ipc_pull(Slice& s, PullWaiter w);
  ConstBuffer pull_source(const Slice& s) const;
  void after_change(Slice& s);  // locks s: serves pulls and starts what may start
  // A pull reply no longer reads `source` (one of the slice's weight buffers; null: `weights`).
  void release_reader(Slice& s, const void* source = nullptr);
  // The pipeline's parts (ps/server_pipeline.cc).
  // Under s.mu: whether an update may start now, and if so whether it must write `spare`
  // (replies still send from `weights`); nullopt while replies send from every buffer it could
  // write.
  std::optional<bool> update_buffer_locked(const Slice& s) const;
  // Where run_update writes the new weights (and, when out of place, reads the old ones).
  // Runs on the updating thread, which alone writes `spare` while the slice is busy; locks s.mu
  // to size it.
  float* update_target(Slice& s, const Update& u, const float** source);
  // Under s.mu: makes an out-of-place update's weights the slice's (`written`: the kernel wrote
  // them; a skipped step wrote nothing and the old weights stay).
  static void publish_weights_locked(Slice& s, const Update& u, bool written);
  // Runs `u` on the calling thread instead of the compute pool when that is cheaper (a small
  // cpu slice, whose update costs less than a hand-over between threads); false: not run.
  bool run_inline(Update& u);
  // Whether an update may write a checkpoint file: on the --checkpoint-every cadence or on a
  // worker's request (ps/job_checkpoint.h), so whenever the job has a checkpoint directory,
  // whatever its cadence. Such updates stay on the compute pool: a callback never blocks.
  bool may_checkpoint() const { return !config_.checkpoint_dir.empty(); }
  // run_update, and a stopped job if its bookkeeping fails (the compute pool's item).
  void run_update_or_stop(Update& u);
  // The cpu update of one slice: split into parts run at once by this thread and the splitter's
  // when the slice is large, the server has --server-threads to spare (fewer updates running
  // than threads) and no pre-pass needs the whole slice; else on this thread alone.
  kernels::StepResult apply_host_update(const kernels::SliceUpdate& k, const OptimizerConfig& cfg);
  // The update's bookkeeping once its version is in the weights (and, with replicas, on the
  // backup): counters, the slice no longer busy, waiting pulls served.
  // `written`: the update wrote new weights (a skipped step or a failed one did not).
  void finish_update(Update& u, std::uint64_t version, bool written);
  // Writes the slice file of `version`, which `u` just computed (`skipped`: its step was
  // skipped, the weights are the old ones); `cadence`: a --checkpoint-every round, which also
  // removes the file two cadences back. A failure is logged; the job goes on. On the updating
  // thread, never a progress thread (may_checkpoint()).
  void write_checkpoint(const Slice& s, const Update& u, std::uint64_t version, bool cadence,
                        bool skipped);
  // Server replicas (ps/server_replica.cc).
  struct Replica;
  // Under s.mu: every worker's counters once `consumed` (an update's ranks) are applied.
  static std::vector<ReplicaCount> counts_locked(const Slice& s,
                                                 const std::vector<std::uint32_t>& consumed);
  // Sends version `version` of `s` (`weights`: where that version's weights are) to the backup;
  // `then` runs once it acknowledged (at once without a backup, or once the backup is lost).
  void replicate(const Slice& s, std::span<const float> weights, std::uint64_t version,
                 std::vector<ReplicaCount> counts, std::function<void()> then);
  struct Replication;
  void send_replica(const std::shared_ptr<Replication>& r);
  void replicate_update(Update& u, std::uint64_t version, bool written);
  // Replicates `s` as it is now (busy meanwhile); at once (then()) when an update holds it.
  void replicate_slice(Slice& s, std::function<void()> then);
  transport::Placement place_replica(Peer& peer, const Header& h, std::size_t size);
  void on_replica_message(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_replica_set(Peer& scheduler, const Header& h, std::span<const std::byte> payload);
  // Connects to the new backup server `rank` at `address` (connector thread).
  std::shared_ptr<Peer> connect_backup(const std::string& address, std::uint32_t rank);
  // On the connector thread: connects to the new backup at `addr` unless it is the `same` one,
  // then sends it every slice; `ack` hears the outcome once the backup acknowledged every copy.
  void copy_to_backup(const std::string& addr, std::uint32_t backup_rank, bool same,
                      std::uint32_t lost, const std::function<void(const Status&)>& ack);
  // The credential server `rank` proves when it connects here: its registration's, while it is
  // this server's primary. Throws psrt::Error (kAuthentication) for any other server.
  Credential primary_credential(std::uint32_t rank);
  // Throws psrt::Error unless `peer` proved the credential of this server's current primary.
  void check_primary(const Peer& peer, const Header& h);
  // Makes the copies from server `lost` slices of this server; returns how many.
  std::size_t promote(std::uint32_t lost);
  void replica_peer_closed(Peer& peer, const Status& why);

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
  WorkerClock clock_locked(const Slice& s, std::uint32_t rank, const WorkerState& w) const;
  // Under s.mu: update `u` made `version` of `s`: its gradient count (for pull replies), and
  // with backup workers the live workers it ran without, logged at a bounded rate and counted.
  void note_round_locked(Slice& s, const Update& u, std::uint64_t version);
  // With backup workers (config.backup_workers > 0): their log; refuses a mode other than sync.
  static std::unique_ptr<BackupLog> make_backup_log(const ServerConfig& config);

  // `step`: the update's guard/clipping outcome when the config asked for one, else null.
  void trace(const Update& u, std::uint64_t version, const kernels::StepResult* step);

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

  std::mutex inflight_mu_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, InFlight>
      inflight_;  // (peer, cookie): inflight_mu_
  std::atomic<std::uint64_t> next_cookie_{1};

  std::unique_ptr<Gpu> gpu_;  // null for a cpu server; set by the constructor, constant after

  std::mutex trace_mu_;
  std::FILE* trace_ = nullptr;  // the pointer is constant after construction; writes: trace_mu_

  // Parts of a large slice's update (apply_host_update): threads - 1 threads, with --server-threads
  // > 1 on a cpu server, else null. Its items take no lock. Before pool_: outlives its users.
  std::unique_ptr<WorkQueue<std::function<void()>>> splitter_;
  std::atomic<int> updates_running_{0};  // run_update calls in progress

  std::unique_ptr<Replica> replica_;  // null without replicas; set before serving, constant after

  std::unique_ptr<BackupLog> backup_log_;  // with backup workers; constant after construction

  std::unique_ptr<WorkQueue<Update>> pool_;  // the compute pool; last: its threads use the above
};

}  // namespace psrt::ps
