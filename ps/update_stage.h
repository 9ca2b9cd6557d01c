// The server's update stage (docs/ARCHITECTURE.md, "The pipeline"): one update of a slice from
// the moment the consistency policy allows it to the moment its version is the slice's. It
// chooses the next update (next_locked), hands it to the compute pool or runs it on the thread at
// hand (submit), applies it (the fused kernels, on the cpu split between threads; a cuda server's
// through its Owner), writes a checkpoint when one is due, publishes the new weights (with
// replicas once the backup acknowledged them) and finishes (counters, the slice no longer busy).
// What the server does around it (receiving, admitting, replying) stays in ps/server.cc; the
// stage reaches back only through Owner.
//
// Which weights buffer an update writes, so that it never waits for replies still sending the
// previous version: update_buffer_locked() and publish_weights_locked() (ps/server_slice.h has
// the fields).
//
// Threads: next_locked() runs under the slice's lock on whatever thread changed the slice; run()
// on a pool thread, or inline on the thread that made a small cpu slice's update ready (the
// progress thread for a push); a large slice's parts on the splitter's threads. No lock of the
// server is held while an update is handed to the pool or runs inline; trace_mu_ is a leaf.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/work_queue.h"
#include "kernels/fused_sgd.h"
#include "ps/consistency.h"
#include "ps/server_slice.h"

namespace psrt::ps {

class ReplicaLink;  // ps/replica_link.h

class UpdateStage {
 public:
  using Slice = served::Slice;
  using Update = served::Update;
  using WorkerState = served::WorkerState;

  // What the stage needs from the server it runs in. Called without any lock of the server held,
  // except where a name ends in _locked (the slice's mu).
  class Owner {
   public:
    virtual ~Owner() = default;
    // The job's optimizer now (SET_OPTIMIZER may change it before the first update).
    virtual OptimizerConfig optimizer() = 0;
    // The policy's view of worker `rank` of `s` (backup workers tag gradients by round).
    virtual WorkerClock clock_locked(const Slice& s, std::uint32_t rank,
                                     const WorkerState& w) const = 0;
    // Update `u` made `version` of `s`: what pull replies report about the round.
    virtual void note_round_locked(Slice& s, const Update& u, std::uint64_t version) = 0;
    // A cuda server's update of `s` on its device (`checkpoint_due`: copy the state back to the
    // host for the checkpoint file).
    virtual kernels::StepResult update_on_device(Slice& s, Update& u, const OptimizerConfig& cfg,
                                                 bool checkpoint_due) = 0;
    // `s` changed (an update finished): serve the pulls it allows, start what may start. Locks s.
    virtual void after_change(Slice& s) = 0;
    // Stops the whole job with `why`: an update could not be applied.
    virtual void stop_job(const Status& why) = 0;
  };

  struct Config {
    Mode mode = Mode::kSync;
    std::uint64_t staleness = 0;
    std::uint32_t backup_workers = 0;
    bool average = true;  // mean of the N gradients (false: their sum)
    std::string checkpoint_dir;
    std::uint64_t checkpoint_every = 0;
    int threads = 1;         // compute pool size
    std::string trace_path;  // JSON line per applied update; empty: none
    bool on_device = false;  // a cuda server: updates run on the device (through Owner)
  };

  // Starts the compute pool (and, with threads > 1 on a cpu server, the splitter). Throws
  // psrt::Error when the trace file cannot be opened.
  UpdateStage(Config config, Owner& owner);
  ~UpdateStage();
  UpdateStage(const UpdateStage&) = delete;
  UpdateStage& operator=(const UpdateStage&) = delete;

  // With replicas: the link each update's version goes to before it is published. Set before
  // serving, constant after.
  void set_replica_link(ReplicaLink* link) { link_ = link; }
  // Stops the compute pool after the queued updates; idempotent.
  void stop();

  // Under s.mu: starts the next update if the policy allows one (the slice is busy until it
  // finished); the caller hands it to submit() once it released the lock.
  std::optional<Update> next_locked(Slice& s);
  // Runs `u` now on this thread when that is cheaper (a small cpu slice, and no checkpoint can be
  // due), else on the compute pool. Takes no lock of the server's.
  void submit(Update u);

  // The kernels' view of an update of `s` with these buffers (host or device).
  kernels::SliceUpdate slice_update(const Slice& s, const Update& u,
                                    const std::vector<const void*>& grads, float* weights,
                                    float* momentum, bool first_step) const;

 private:
  // Under s.mu: whether an update may start now, and if so whether it must write `spare`
  // (replies still send from `weights`); nullopt while replies send from every buffer it could
  // write.
  std::optional<bool> update_buffer_locked(const Slice& s) const;
  // Where run() writes the new weights (and, when out of place, reads the old ones). Runs on
  // the updating thread, which alone writes `spare` while the slice is busy; locks s.mu to size
  // it.
  static float* update_target(Slice& s, const Update& u, const float** source);
  // Under s.mu: makes an out-of-place update's weights the slice's (`written`: the kernel wrote
  // them; a skipped step wrote nothing and the old weights stay).
  static void publish_weights_locked(Slice& s, const Update& u, bool written);
  // Whether an update may write a checkpoint file: on the --checkpoint-every cadence or on a
  // worker's request (ps/job_checkpoint.h), so whenever the job has a checkpoint directory,
  // whatever its cadence. Such updates stay on the compute pool: a callback never blocks.
  bool may_checkpoint() const { return !config_.checkpoint_dir.empty(); }
  // run(), and a stopped job if its bookkeeping fails (the compute pool's item).
  void run_or_stop(Update& u);
  void run(Update& u);
  // Applies `u` to the weights (the update's kernel on the cpu or, through Owner, the device).
  kernels::StepResult apply(Update& u, const OptimizerConfig& cfg, std::uint64_t version,
                            bool checkpoint_due);
  // The cpu update of one slice: split into parts run at once by this thread and the splitter's
  // when the slice is large, the server has threads to spare (fewer updates running than
  // threads) and no pre-pass needs the whole slice; else on this thread alone.
  kernels::StepResult apply_host_update(const kernels::SliceUpdate& k, const OptimizerConfig& cfg);
  // The update of an aggregate-only slice (KeyUpdate::kMean/kSum): its new value is the round's
  // mean (or sum).
  kernels::StepResult aggregate_only(Slice& s, const Update& u);
  // Sends the version to the backup (with replicas), then finish().
  void publish(Update& u, std::uint64_t version, bool written);
  // The update's bookkeeping once its version is in the weights (and, with replicas, on the
  // backup): counters, the slice no longer busy, waiting pulls served.
  // `written`: the update wrote new weights (a skipped step or a failed one did not).
  void finish(Update& u, std::uint64_t version, bool written);
  // Writes the slice file of `version`, which `u` just computed (`skipped`: its step was
  // skipped, the weights are the old ones); `cadence`: a --checkpoint-every round, which also
  // removes the file two cadences back. A failure is logged; the job goes on. On the updating
  // thread, never a progress thread (may_checkpoint()).
  void write_checkpoint(const Slice& s, const Update& u, std::uint64_t version, bool cadence,
                        bool skipped);
  // Why the gradients of `u` cannot be read as one dtype of s.count elements; empty when they
  // can. The last line of defence behind the server's admission of pushes.
  static std::string bad_grads(const Slice& s, const Update& u);
  // `step`: the update's guard/clipping outcome when the config asked for one, else null.
  void trace(const Update& u, std::uint64_t version, const kernels::StepResult* step);

  const Config config_;  // constant
  Owner& owner_;
  ReplicaLink* link_ = nullptr;  // set before serving, constant after; null without replicas

  std::mutex trace_mu_;
  std::FILE* trace_ = nullptr;  // the pointer is constant after construction; writes: trace_mu_

  // Parts of a large slice's update (apply_host_update): threads - 1 threads, with threads > 1
  // on a cpu server, else null. Its items take no lock. Before pool_: outlives its users.
  std::unique_ptr<WorkQueue<std::function<void()>>> splitter_;
  std::atomic<int> updates_running_{0};  // run() calls in progress

  std::unique_ptr<WorkQueue<Update>> pool_;  // the compute pool; last: its threads use the above
};

}  // namespace psrt::ps
