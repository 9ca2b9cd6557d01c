// The server's update stage (ps/update_stage.h; docs/ARCHITECTURE.md, "The pipeline").
#include "ps/update_stage.h"

#include <fmt/core.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <exception>
#include <latch>
#include <utility>

#include "base/exception_status.h"
#include "base/log.h"
#include "kernels/dispatch.h"
#include "ps/checkpoint.h"
#include "ps/job_checkpoint.h"
#include "ps/metric_hooks.h"
#include "ps/optimizer_state.h"
#include "ps/replica_link.h"

namespace psrt::ps {
namespace {

using served::GradBuf;
using served::HostGrad;
using served::IpcGrad;

// A slice this small is updated where its last gradient arrived: its update (a few
// microseconds) costs less than waking a pool thread and switching to it.
constexpr std::size_t kInlineUpdateBytes = std::size_t{64} * 1024;

// A part of a split update is at least this many elements (1 MiB of fp32): smaller ones cost
// more to hand over than they save.
constexpr std::size_t kMinPartElements = std::size_t{256} << 10;

// Set while this thread runs an update inline: the update's own after_change() hands the next
// one to the pool rather than recurse.
thread_local bool t_updating_inline = false;

}  // namespace

UpdateStage::UpdateStage(Config config, Owner& owner) : config_(std::move(config)), owner_(owner) {
  if (!config_.trace_path.empty()) {
    trace_ = std::fopen(config_.trace_path.c_str(), "a");
    if (!trace_)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot open the trace file '{}'", config_.trace_path));
  }
  if (!config_.on_device && config_.threads > 1)
    splitter_ = std::make_unique<WorkQueue<std::function<void()>>>(
        config_.threads - 1, [](std::function<void()>& part) { part(); });
  pool_ =
      std::make_unique<WorkQueue<Update>>(config_.threads, [this](Update& u) { run_or_stop(u); });
}

UpdateStage::~UpdateStage() {
  stop();
  if (trace_) std::fclose(trace_);
}

void UpdateStage::stop() {
  if (pool_) pool_->stop();
  if (splitter_) splitter_->stop();
}

std::optional<UpdateStage::Update> UpdateStage::next_locked(Slice& s) {
  if (s.busy || s.workers.empty()) return std::nullopt;
  const std::optional<bool> into_spare = update_buffer_locked(s);
  if (!into_spare) return std::nullopt;
  std::vector<WorkerClock> clocks;
  clocks.reserve(s.workers.size());
  for (const auto& [rank, w] : s.workers)
    clocks.push_back(owner_.clock_locked(s, rank, w));
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

std::optional<bool> UpdateStage::update_buffer_locked(const Slice& s) const {
  if (s.readers == 0) return false;  // in place: nothing reads the weights
  // A cuda server updates its device weights in place only; a cpu one writes `spare` unless
  // replies still send from it too (each reads one of the two last versions).
  if (config_.on_device || s.spare_readers > 0) return std::nullopt;
  return true;
}

void UpdateStage::submit(Update u) {
  // A checkpoint (due or requested) writes a file: that stays on the pool, as every cuda update
  // does. An update run inline that makes the next one ready hands that one to the pool rather
  // than recurse.
  if (!config_.on_device && !may_checkpoint() && !t_updating_inline &&
      u.slice->count * sizeof(float) <= kInlineUpdateBytes) {
    t_updating_inline = true;
    run_or_stop(u);
    t_updating_inline = false;
    return;
  }
  // Refused only once stop() began: the job is ending, and the slice stays busy.
  (void)pool_->push(std::move(u));
}

void UpdateStage::run_or_stop(Update& u) {
  ++updates_running_;
  struct Done {
    std::atomic<int>& n;
    ~Done() { --n; }
  } done{updates_running_};
  try {
    run(u);
  } catch (...) {
    // Past the update itself (which stops the job on failure): bookkeeping that could not
    // allocate. The job cannot trust this slice any more.
    const Status why = current_exception_status(
        fmt::format("update of key {} slice {}", u.slice->key, u.slice->index));
    PSRT_LOG_ERROR("{}", why.message());
    owner_.stop_job(why);
  }
}

void UpdateStage::run(Update& u) {
  const auto started = metrics_now();
  Slice& s = *u.slice;
  OptimizerConfig cfg = owner_.optimizer();
  if (u.grads.front().lr > 0.f) cfg.lr = u.grads.front().lr;
  std::uint64_t version;
  {
    std::lock_guard lock(s.mu);
    assert(s.busy && "an update runs only on a slice next_locked() marked busy");
    assert((u.into_spare ? s.spare_readers : s.readers) == 0 &&
           "an update never writes a buffer a pull reply reads");
    version = s.version + 1;
  }
  const bool cadence =
      may_checkpoint() && config_.checkpoint_every > 0 && version % config_.checkpoint_every == 0;
  const bool checkpoint_due =
      cadence || (may_checkpoint() && checkpoint_requested(config_.checkpoint_dir, version));
  kernels::StepResult result;
  std::string bad = bad_grads(s, u);
  try {
    if (!bad.empty()) {
      // The server's admission keeps this from happening; if it did, reading on would read past
      // a buffer or misread one. Nothing is applied, and the server stops the job below.
      PSRT_LOG_ERROR("update of key {} slice {} not applied: {}", s.key, s.index, bad);
    } else {
      result = apply(u, cfg, version, checkpoint_due);
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
    owner_.stop_job(Status(ErrorCode::kInternal, "an update could not be applied: " + bad));
  const bool written = bad.empty() && !result.skipped;
  if (bad.empty()) return publish(u, version, written);
  finish(u, version, written);
}

kernels::StepResult UpdateStage::apply(Update& u, const OptimizerConfig& cfg, std::uint64_t version,
                                       bool checkpoint_due) {
  Slice& s = *u.slice;
  if (s.update != KeyUpdate::kOptimizer) return aggregate_only(s, u);
  if (config_.on_device) return owner_.update_on_device(s, u, cfg, checkpoint_due);
  // Only this thread touches weights and momentum while the slice is busy (no pull reply is in
  // flight either), so the update runs without the slice lock (ps/server_slice.h, "The one
  // access without a lock"; asserted in run()).
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
  kernels::StepResult result = apply_host_update(k, cfg);
  state.finish(result);
  return result;
}

// Aggregate-only keys (psrt/key_update.h): a round's value is the mean or the sum of its
// gradients, with no optimizer. The fused update computes it: from weights of zero, with
// learning rate -1 and nothing else, its spec (kernels/fused_sgd.h) gives w = 0 - (-1 * g) = g,
// the aggregated gradient, bit for bit.
kernels::StepResult UpdateStage::aggregate_only(Slice& s, const Update& u) {
  std::vector<const void*> grads;
  grads.reserve(u.grads.size());
  for (const auto& g : u.grads)
    grads.push_back(std::get<HostGrad>(g.where).data.get());
  const float* source = nullptr;
  float* target = update_target(s, u, &source);
  std::fill_n(target, s.count, 0.f);
  kernels::SliceUpdate k = slice_update(s, u, grads, target, nullptr, false);
  k.grad_scale = s.update == KeyUpdate::kMean ? 1.f / static_cast<float>(grads.size()) : 1.f;
  OptimizerConfig sum_only;  // no momentum, weight decay, clipping or guard
  sum_only.lr = -1.f;
  return apply_host_update(k, sum_only);
}

float* UpdateStage::update_target(Slice& s, const Update& u, const float** source) {
  *source = nullptr;
  if (!u.into_spare) return s.weights.data();
  // Only this thread writes `spare`'s elements now: the slice is busy with this update, and no
  // reply reads `spare` (spare_readers was 0 when it started, and replies start from `weights`).
  // The vector itself is read under the lock by release_reader(): it is sized under it (once).
  {
    std::lock_guard lock(s.mu);
    if (s.spare.size() != s.count) s.spare.resize(s.count);
  }
  *source = s.weights.data();
  return s.spare.data();
}

kernels::StepResult UpdateStage::apply_host_update(const kernels::SliceUpdate& k,
                                                   const OptimizerConfig& cfg) {
  // Threads free for parts: the server's, less the other updates running now.
  const int spare_threads = config_.threads - updates_running_.load() + 1;
  std::size_t parts = 1;
  if (splitter_ && !kernels::needs_prepass(cfg) && spare_threads > 1)
    parts =
        std::min<std::size_t>(static_cast<std::size_t>(spare_threads), k.count / kMinPartElements);
  if (parts <= 1) return kernels::apply_update(k, cfg, MemoryType::kHost);
  // Equal parts on 64-element boundaries (whole vectors for every ISA); the last takes the rest.
  const std::size_t step = (k.count / parts) / 64 * 64;
  const std::size_t width = kernels::dtype_size(k.dtype);
  std::vector<kernels::SliceUpdate> part(parts, k);
  std::vector<std::vector<const void*>> grads(parts);
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t begin = p * step;
    kernels::SliceUpdate& q = part[p];
    q.count = p + 1 == parts ? k.count - begin : step;
    q.weights = k.weights + begin;
    if (k.weights_in) q.weights_in = k.weights_in + begin;
    if (k.momentum) q.momentum = k.momentum + begin;
    if (k.exp_avg_sq) q.exp_avg_sq = k.exp_avg_sq + begin;
    for (int j = 0; j < k.num_grads; ++j)
      grads[p].push_back(static_cast<const std::byte*>(k.grads[j]) + begin * width);
    q.grads = grads[p].data();
  }
  std::vector<std::exception_ptr> failed(parts);
  std::latch finished(static_cast<std::ptrdiff_t>(parts - 1));
  for (std::size_t p = 1; p < parts; ++p) {
    auto run = [&, p] {
      try {
        kernels::apply_update(part[p], cfg, MemoryType::kHost);
      } catch (...) {
        failed[p] = std::current_exception();
      }
      finished.count_down();
    };
    // Refused once stop() began (or no memory to queue it): this thread runs the part itself.
    bool queued = false;
    try {
      queued = splitter_->push(run);
    } catch (...) {
    }
    if (!queued) run();
  }
  try {
    kernels::apply_update(part[0], cfg, MemoryType::kHost);
  } catch (...) {
    failed[0] = std::current_exception();
  }
  finished.wait();  // bounded: each part is one pass over its elements
  for (auto& e : failed)
    if (e) std::rethrow_exception(e);
  return {};  // no pre-pass ran: nothing to report
}

void UpdateStage::write_checkpoint(const Slice& s, const Update& u, std::uint64_t version,
                                   bool cadence, bool skipped) {
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

void UpdateStage::publish(Update& u, std::uint64_t version, bool written) {
  if (!link_) return finish(u, version, written);
  Slice& s = *u.slice;
  std::vector<ReplicaCount> counts;
  {
    std::lock_guard lock(s.mu);
    counts = ReplicaLink::counts_locked(s, u.ranks);
  }
  // The weights of this version: `spare` when the update wrote there (published by finish(),
  // after the backup has them). The slice is busy: nothing else writes either.
  const std::vector<float>& weights = u.into_spare && written ? s.spare : s.weights;
  auto held = std::make_shared<Update>(std::move(u));
  link_->replicate(s, weights, version, std::move(counts),
                   [this, held, version, written] { finish(*held, version, written); });
}

void UpdateStage::publish_weights_locked(Slice& s, const Update& u, bool written) {
  if (u.into_spare && written) {
    // The replies still sending the old version now send from `spare`; the new one has none.
    std::swap(s.weights, s.spare);
    std::swap(s.readers, s.spare_readers);
    assert(s.readers == 0);
  }
  s.into_spare = false;
}

void UpdateStage::finish(Update& u, std::uint64_t version, bool written) {
  Slice& s = *u.slice;
  {
    std::lock_guard lock(s.mu);
    publish_weights_locked(s, u, written);
    s.version = version;
    owner_.note_round_locked(s, u, version);
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
  owner_.after_change(s);
}

kernels::SliceUpdate UpdateStage::slice_update(const Slice& s, const Update& u,
                                               const std::vector<const void*>& grads,
                                               float* weights, float* momentum,
                                               bool first_step) const {
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

std::string UpdateStage::bad_grads(const Slice& s, const Update& u) {
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

void UpdateStage::trace(const Update& u, std::uint64_t version, const kernels::StepResult* step) {
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

}  // namespace psrt::ps
