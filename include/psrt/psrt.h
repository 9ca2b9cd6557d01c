// psrt worker API: push gradients to and pull weights from the job's parameter servers.
//
// A job is started by `psrun` (tools/psrun), which runs a scheduler, S servers and N copies of
// your program with the PSRT_* environment set (`psrun --help-env` lists it). Your program joins
// with Worker::from_env(). A tensor is a key (any uint64_t you choose) and a float array; psrt
// cuts it into slices spread over the servers, but you only ever see whole tensors.
//
//   #include <psrt/psrt.h>
//   int main() {
//     psrt::Worker w = psrt::Worker::from_env();
//     std::vector<float> weights(1000, 0.f), grad(1000);
//     w.set_optimizer({.lr = 0.1f, .momentum = 0.9f});
//     w.init(/*key=*/7, weights);                  // first init of key 7 in the job wins
//     w.pull(7, weights).wait();                   // everyone starts from the same values
//     for (int step = 0; step < 100; ++step) {
//       compute_gradient(weights, grad);           // your model
//       w.push_pull(7, grad, weights).wait();      // weights = result of this round
//     }
//     w.shutdown();
//   }
//
// Contracts common to every call:
// - Thread safety: every method may be called from several threads at once, except that the
//   Worker must not be destroyed or moved while calls are running.
// - Asynchronous calls (push, pull, push_pull) return a Handle at once. The spans they take are
//   read (gradients) or written (weights) in place, with no copy: keep them alive and do not
//   touch them until the Handle completes.
// - Errors: blocking calls throw psrt::Error; asynchronous ones report through Handle::wait(),
//   which throws psrt::Error naming the server, key and cause (a lost server, a timeout, a
//   refused request). Every wait is bounded by PSRT_OP_TIMEOUT_MS.
// - Consistency is chosen per job (psrun --mode): in `sync` a pull returns the weights of the
//   round that includes this worker's last push of the key; in `async` and `ssp` it returns
//   weights that include at least every gradient this worker pushed before it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "psrt/buffer.h"
#include "psrt/error.h"
#include "psrt/grad_type.h"
#include "psrt/key_update.h"
#include "psrt/optimizer.h"

namespace psrt {

using Key = std::uint64_t;

// The servers' optimizer, OptimizerConfig: psrt/optimizer.h.

// Gradient element types (GradType): psrt/grad_type.h.

// What the servers do with a key's rounds (KeyUpdate): psrt/key_update.h.

namespace detail {
struct HandleState;
}

// Completion of one asynchronous operation. Copyable; all copies see the same completion.
// A default-constructed Handle is already complete.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  // Blocks until the operation completes (bounded by PSRT_OP_TIMEOUT_MS) and rethrows its error
  // as psrt::Error. May be called several times and from several threads.
  void wait() const;
  // Waits up to `timeout`; true when complete (then wait() returns or throws at once).
  bool wait_for(std::chrono::milliseconds timeout) const;
  // True once complete, without blocking.
  bool ready() const;
  // True once every byte this operation sends has left the caller's buffer: a push_pull's
  // gradient may then be reused although its round (and `out`) may still be pending.
  bool sent() const;
  // Waits up to `timeout` for sent().
  bool wait_sent_for(std::chrono::milliseconds timeout) const;
  // The version of the weights a completed pull or push_pull received: the number of updates
  // the servers had applied to the key (in sync, its rounds; 0 = the initial value), the lowest
  // over the key's slices. 0 for a push or an operation not complete (or failed).
  std::uint64_t version() const;
  // Backup workers (psrun --backup-workers, docs/elastic.md), for a completed pull or
  // push_pull: how many of this worker's pushes of the key's slices the servers dropped as late
  // since its previous pull of them (their round had run without it; the weights received
  // are that round's or newer), and the fewest gradients the update that made a received
  // slice's version averaged (0 for the initial value). 0 for a push or an operation not
  // complete.
  std::uint64_t dropped() const;
  std::uint32_t round_workers() const;

 private:
  std::shared_ptr<detail::HandleState> state_;
};

// How a worker reaches its job. from_env() fills this from the PSRT_* environment; programs
// that launch processes themselves can fill it directly.
struct WorkerOptions {
  std::string scheduler;                              // "host:port" (PSRT_SCHEDULER)
  std::string transport;                              // "ucx" or "tcp" (PSRT_TRANSPORT)
  std::string secret;                                 // the job secret (PSRT_SECRET)
  int rank = -1;                                      // wanted rank, -1 = any free one (PSRT_RANK)
  std::chrono::milliseconds op_timeout{300'000};      // PSRT_OP_TIMEOUT_MS
  std::chrono::milliseconds connect_timeout{30'000};  // PSRT_CONNECT_TIMEOUT_MS
  std::chrono::milliseconds heartbeat{1'000};         // PSRT_HEARTBEAT_MS
  std::chrono::microseconds spin{100};                // PSRT_SPIN_US
  bool cuda_ipc = true;  // PSRT_CUDA_IPC: share GPU buffers with CUDA servers on this host
  bool secure = false;   // PSRT_SECURE: seal every message with keys from the secret
  // PSRT_SEND_WINDOW: gradient bytes this worker keeps in flight to one server (sent, not yet
  // acknowledged as received); further slices wait, the first-used keys first. 0 = no bound;
  // -1 = by transport: 262144 over tcp and over ucx with UCX_TLS=tcp, no bound over UCX's RDMA
  // and shared memory.
  std::int64_t send_window = -1;
  // PSRT_CHECKPOINT_DIR (psrun --checkpoint-dir): where request_checkpoint() asks for a round.
  std::string checkpoint_dir;
};

// A key's optimizer state on the servers, for the whole tensor (its slices joined), as
// Worker::optimizer_state reads it and Worker::set_optimizer_state writes it. Empty vectors: no
// state (no update applied yet, or an optimizer that keeps none: SGD without momentum).
struct OptimizerState {
  std::vector<float> momentum;    // SGD: the momentum buffer; Adam/AdamW: exp_avg
  std::vector<float> exp_avg_sq;  // Adam/AdamW only
  std::uint64_t steps = 0;        // Adam/AdamW: the updates applied (torch's state["step"])
  std::uint64_t version = 0;      // read: the key's version (lowest over its slices); not written
};

class Worker {
 public:
  // Joins the job described by the PSRT_* environment that psrun sets. Blocking: returns once
  // the scheduler has admitted this worker (in a new job, once every worker and server has
  // arrived). Throws psrt::Error naming the variable that is missing or malformed, or the peer
  // that could not be reached.
  static Worker from_env();
  // Same, from explicit options.
  static Worker join(const WorkerOptions& options);

  Worker(Worker&&) noexcept;
  Worker& operator=(Worker&&) noexcept;
  ~Worker();  // shutdown(), errors logged instead of thrown

  int rank() const;
  // Live workers when this one joined (workers may join and leave later).
  int num_workers() const;
  // True when this worker joined a job already running (after the job's first N workers met):
  // the other workers are past their start-up, so a barrier() of the start-up would wait for
  // them forever; pull the current weights and take part from the next round instead
  // (docs/elastic.md).
  bool joined() const;
  int num_servers() const;
  // The checkpoint round the job resumed from (psrun --checkpoint-dir), 0 for a fresh job.
  std::uint64_t resume_round() const;

  // Sets the servers' optimizer. Blocking. Call it before the first push, with the same values
  // on every worker (a different value is refused). Without it, psrun's --lr/--momentum/...
  // apply.
  void set_optimizer(const OptimizerConfig& config);
  // The learning rate applied to the rounds of the gradients this worker pushes from now on,
  // for a schedule (0 = the configured OptimizerConfig::lr again). Every worker must follow the
  // same schedule: a round takes the rate carried by its first gradient. Non-blocking.
  void set_learning_rate(float lr);

  // Stores `value` as key's initial weights unless the key already exists (the first init in
  // the job wins; later ones check the size and keep the stored values). Blocking: returns once
  // the value is stored. When the job resumes from a checkpoint, the checkpoint's weights win.
  void init(Key key, std::span<const float> value);
  // The same, choosing what the servers do with the key's rounds (psrt/key_update.h). The key's
  // first init in the job decides; a later init with another KeyUpdate is refused
  // (kInvalidArgument).
  void init(Key key, std::span<const float> value, KeyUpdate update);

  // Sends a gradient for `key` (same length as its weights). Completes once every server has
  // received its slice; `grad` may be reused then.
  Handle push(Key key, std::span<const float> grad);
  // The same with fp16/bf16 gradient bits (`count` elements at `grad`).
  Handle push(Key key, const std::uint16_t* grad, std::size_t count, GradType type);
  // Receives key's weights into `out` (same length). See the consistency note above.
  Handle pull(Key key, std::span<float> out);
  // push + pull in one message per slice: `out` = the weights after the round that includes
  // `grad`. `grad` and `out` may not overlap.
  Handle push_pull(Key key, std::span<const float> grad, std::span<float> out);

  // The same three calls on memory-typed views, for GPU tensors (e.g. a LibTorch CUDA tensor's
  // data_ptr() with MemoryType::kCuda) as well as host memory. `grad` holds count elements of
  // `type`; `out` holds count fp32 values (size in bytes). Device memory:
  // - its bytes must be written by the time the work queued on the device's legacy default
  //   stream (LibTorch's default stream) at the call has finished: psrt orders its reads after
  //   that work (work on other streams: synchronise it first). `out` is written after that
  //   work too, and is complete and visible to every stream when the Handle completes;
  // - how it travels is chosen per server and logged once: (a) handed to the transport as is
  //   when the transport carries CUDA memory (UCX built with CUDA: GPUDirect RDMA / cuda_ipc);
  //   else (b) CUDA IPC when the server is a CUDA server on this host (psrun --server-device
  //   cuda): the server reads the gradient and writes `out` in place, and reads are ordered
  //   after the work queued on the legacy default stream at the call (PSRT_CUDA_IPC=0 turns
  //   this off); else (c) staged through pinned host buffers, copies pipelined with the sends;
  // - with CUDA IPC, `grad` is read by the server's update itself: Handle::sent() turns true
  //   only once that update has run;
  // - a buffer marked kCuda that the CUDA runtime does not know is refused
  //   (kInvalidArgument), and so is any kCuda buffer where CUDA is unusable (kUnsupported).
  // A buffer marked kHost is taken as host memory without asking the CUDA runtime.
  Handle push(Key key, ConstBuffer grad, GradType type);
  Handle pull(Key key, MutableBuffer out);
  Handle push_pull(Key key, ConstBuffer grad, GradType type, MutableBuffer out);

  // The version of key's weights on the servers now: the number of updates they have applied
  // to it (in sync, its rounds; 0 = the initial value), the minimum over the key's slices, as
  // Handle::version() of a pull would report it. For checking whether the model moved before
  // pulling it: one small message per slice, no weights, and unlike a pull it does not wait
  // for this worker's pushes to be applied. Blocking, bounded by PSRT_OP_TIMEOUT_MS. Throws
  // psrt::Error: kNotFound for a key no worker has initialised, the pull's errors for a lost
  // server. With --replicas 2 it asks the server that serves each slice now.
  std::uint64_t version(Key key);

  // Blocks until every live worker has called barrier(). Bounded by PSRT_OP_TIMEOUT_MS.
  void barrier();

  // The servers' optimizer state of `key` (momentum, Adam's moments and step count): for saving
  // it as torch's optimizer.state_dict() does. Read between rounds: call it once this worker's
  // pushes of the key are applied (after its pulls completed) in a sync job, where no round runs
  // without this worker. Blocking, bounded by PSRT_OP_TIMEOUT_MS. Throws psrt::Error:
  // kNotFound for a key never initialised, kUnsupported for an aggregate-only key, a cuda
  // server (--server-device cuda) or --replicas 2, kInvalidArgument while an update runs.
  OptimizerState optimizer_state(Key key);
  // Stores `state` as the servers' optimizer state of `key` (every slice's part; `version` is
  // not written): for resuming from a saved state. Only between rounds, with no gradient of the
  // key queued: every worker waits for its pulls, then a barrier(), then one worker sets the
  // state, then a barrier() (as psrt.torch's load_state_dict() does). The state must fit the
  // job's optimizer (momentum for SGD with momentum; momentum, exp_avg_sq and steps for
  // Adam/AdamW). Blocking. Throws psrt::Error: kInvalidArgument for sizes that do not fit, a
  // state of another optimizer, or gradients queued; the optimizer_state() errors otherwise.
  void set_optimizer_state(Key key, const OptimizerState& state);

  // Asks the job for a checkpoint of round `round` (docs/checkpoints.md): every server writes
  // its slices (weights and optimizer state) after the update that makes version `round`, and
  // keeps them; a job restarted from the directory (psrun --max-restarts, or psrun
  // --checkpoint-dir DIR again) resumes there (resume_round()). Call it before this worker
  // pushes round `round` - 1 (in sync mode, with `round` >= the rounds it has pushed + 2: every
  // server hears of it before the round runs). Works with --checkpoint-every 0. Non-blocking (it
  // writes <DIR>/r<round>.request). Throws psrt::Error: kInvalidArgument when the job has no
  // checkpoint directory (psrun --checkpoint-dir) or for round 0, kSystem when the file cannot
  // be written.
  void request_checkpoint(std::uint64_t round);

  // Leaves the job: waits for this worker's outstanding operations (bounded), unregisters from
  // the scheduler and closes every connection. Idempotent; later calls on this Worker throw.
  // A program that ends normally (return from main, exit()) without calling it still leaves:
  // an exit handler shuts down every Worker not shut down yet. A crash or a kill does not
  // leave: the job reports that worker lost.
  void shutdown();

  class Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace psrt
