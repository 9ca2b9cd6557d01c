// The server's pipeline (docs/ARCHITECTURE.md, "The pipeline"): which weights buffer an update
// writes, so that it never waits for replies still sending the previous version, and which
// updates run on the thread at hand instead of the compute pool.
#include <fmt/core.h>

#include <cassert>

#include "base/exception_status.h"
#include "base/log.h"
#include "ps/server.h"

namespace psrt::ps {
namespace {

// A slice this small is updated where its last gradient arrived: its update (a few
// microseconds) costs less than waking a pool thread and switching to it.
constexpr std::size_t kInlineUpdateBytes = 64 * 1024;

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
  // Only this thread touches `spare` now: the slice is busy with this update, and no reply
  // reads `spare` (spare_readers was 0 when it started, and replies start from `weights`).
  if (s.spare.size() != s.count) s.spare.resize(s.count);
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
  // A checkpoint writes a file: that stays on the pool, as every cuda update does. An update
  // run inline that makes the next one ready hands that one to the pool rather than recurse.
  const bool checkpoints = !config_.checkpoint_dir.empty() && config_.checkpoint_every > 0;
  if (gpu_ || checkpoints || t_updating_inline ||
      u.slice->count * sizeof(float) > kInlineUpdateBytes)
    return false;
  t_updating_inline = true;
  run_update_or_stop(u);
  t_updating_inline = false;
  return true;
}

void Server::run_update_or_stop(Update& u) {
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

}  // namespace psrt::ps
