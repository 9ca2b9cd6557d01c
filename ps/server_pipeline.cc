// The server's pipeline (docs/ARCHITECTURE.md, "The pipeline"): which weights buffer an update
// writes, so that it never waits for replies still sending the previous version, and which
// updates run on the thread at hand instead of the compute pool.
#include <fmt/core.h>

#include <algorithm>
#include <cassert>
#include <exception>
#include <latch>
#include <vector>

#include "base/exception_status.h"
#include "base/log.h"
#include "kernels/dispatch.h"
#include "ps/server.h"

namespace psrt::ps {
namespace {

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

std::optional<bool> Server::update_buffer_locked(const Slice& s) const {
  if (s.readers == 0) return false;  // in place: nothing reads the weights
  // A cuda server updates its device weights in place only; a cpu one writes `spare` unless
  // replies still send from it too (each reads one of the two last versions).
  if (gpu_ || s.spare_readers > 0) return std::nullopt;
  return true;
}

float* Server::update_target(Slice& s, const Update& u, const float** source) {
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

void Server::publish_weights_locked(Slice& s, const Update& u, bool written) {
  if (u.into_spare && written) {
    // The replies still sending the old version now send from `spare`; the new one has none.
    std::swap(s.weights, s.spare);
    std::swap(s.readers, s.spare_readers);
    assert(s.readers == 0);
  }
  s.into_spare = false;
}

bool Server::run_inline(Update& u) {
  // A checkpoint (due or requested) writes a file: that stays on the pool, as every cuda update
  // does. An update run inline that makes the next one ready hands that one to the pool rather
  // than recurse.
  if (gpu_ || may_checkpoint() || t_updating_inline ||
      u.slice->count * sizeof(float) > kInlineUpdateBytes)
    return false;
  t_updating_inline = true;
  run_update_or_stop(u);
  t_updating_inline = false;
  return true;
}

void Server::run_update_or_stop(Update& u) {
  ++updates_running_;
  struct Done {
    std::atomic<int>& n;
    ~Done() { --n; }
  } done{updates_running_};
  try {
    run_update(u);
  } catch (...) {
    // Past the update itself (which stops the job on failure): bookkeeping that could not
    // allocate. The job cannot trust this slice any more.
    const Status why = current_exception_status(
        fmt::format("update of key {} slice {}", u.slice->key, u.slice->index));
    PSRT_LOG_ERROR("{}", why.message());
    stop_job(why);
  }
}

kernels::StepResult Server::apply_host_update(const kernels::SliceUpdate& k,
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

}  // namespace psrt::ps
