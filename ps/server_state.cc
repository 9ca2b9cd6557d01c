// A slice's optimizer state read and written by a worker (OPTIMIZER_STATE, SET_OPTIMIZER_STATE;
// Worker::optimizer_state): torch's optimizer.state_dict() in server mode. Both act only between
// two updates of the slice, under its lock: no update is running, and a write also needs no
// gradient queued or arriving, so that it lands between two rounds. cpu servers only (a cuda
// server's state lives on the device).
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/fused_adam.h"
#include "ps/optimizer_state.h"
#include "ps/server.h"

namespace psrt::ps {
namespace {

StateKind kind_of(const std::vector<float>& state, std::size_t count) {
  if (state.empty()) return StateKind::kNone;
  return state.size() == count ? StateKind::kMomentum : StateKind::kAdam;
}

}  // namespace

std::string Server::state_refusal(const Slice& s, const Header& h) const {
  if (gpu_)
    return fmt::format(
        "{} of key {}: a cuda server keeps the optimizer state on its device; "
        "read or write it on cpu servers (psrun --server-device cpu), or "
        "checkpoint the job (psrun --checkpoint-dir, docs/checkpoints.md)",
        to_string(h.type), h.key);
  if (link_ && h.type == MsgType::kSetOptimizerState)
    return fmt::format(
        "SET_OPTIMIZER_STATE of key {}: with --replicas 2 the backup would not "
        "hold the state loaded; resume such a job from its checkpoints (psrun "
        "--checkpoint-dir, docs/checkpoints.md)",
        h.key);
  if (s.update != KeyUpdate::kOptimizer)
    return fmt::format("{} of key {}: {} has no optimizer state", to_string(h.type), h.key,
                       to_string(s.update));
  return {};
}

void Server::on_optimizer_state(Peer& peer, const Header& h, Slice& s) {
  if (auto why = state_refusal(s, h); !why.empty())
    return peer.send_error(h.request_id, ErrorCode::kUnsupported, why, false);
  Header r;
  r.type = MsgType::kOptimizerStateReply;
  r.dtype = WireType::kF32;
  r.request_id = h.request_id;
  r.key = s.key;
  r.count = s.count;
  auto part = std::make_shared<std::vector<float>>(s.count, 0.f);
  {
    std::lock_guard lock(s.mu);
    if (s.busy)
      return peer.send_error(
          h.request_id, ErrorCode::kInvalidArgument,
          fmt::format("key {} slice {} is being updated: read the optimizer state between "
                      "rounds (a sync job, after synchronize() on this worker)",
                      s.key, s.index),
          false);
    const StateKind kind = kind_of(s.momentum, s.count);
    r.set_state_kind(static_cast<std::uint32_t>(kind));
    r.round = s.version;
    if (kind == StateKind::kAdam) r.total = adam_steps(s.momentum, s.count);
    const std::size_t from = h.part() == 1 ? 0 : s.count;
    if (kind == StateKind::kAdam || (kind == StateKind::kMomentum && h.part() == 1))
      std::copy_n(s.momentum.begin() + static_cast<std::ptrdiff_t>(from), s.count, part->begin());
  }
  const ConstBuffer b{part->data(), part->size() * sizeof(float)};
  peer.send(r, {&b, 1}, [part](const Status&) {});
}

std::string Server::set_state_locked(Slice& s, const Header& h, const OptimizerConfig& cfg,
                                     const std::vector<float>& values) {
  if (s.busy || s.arriving > 0 ||
      std::any_of(s.workers.begin(), s.workers.end(),
                  [](const auto& w) { return !w.second.queued.empty(); }))
    return fmt::format(
        "key {} slice {} has gradients queued or an update running: load the "
        "optimizer state between rounds, once every worker has synchronized "
        "(psrt.torch's load_state_dict() does)",
        s.key, s.index);
  const bool adam = kernels::is_adam(cfg);
  if (!adam && (h.part() == 2 || cfg.momentum == 0.f))
    return fmt::format(
        "key {} slice {}: the job's optimizer is SGD{}, which keeps {}; the state "
        "loaded was written by another optimizer",
        s.key, s.index, cfg.momentum == 0.f ? " without momentum" : "",
        cfg.momentum == 0.f ? "no state" : "only a momentum buffer");
  const std::size_t want = adam ? adam_state_floats(s.count) : s.count;
  if (s.momentum.size() != want) s.momentum.assign(want, 0.f);
  const std::size_t at = h.part() == 1 ? 0 : s.count;
  std::copy(values.begin(), values.end(), s.momentum.begin() + static_cast<std::ptrdiff_t>(at));
  if (adam) set_adam_steps(s.momentum, s.count, h.round);
  return {};
}

void Server::on_set_optimizer_state(Peer& peer, const Header& h, InFlight& in) {
  Slice& s = checked_slice(peer, h);
  if (auto why = state_refusal(s, h); !why.empty())
    return peer.send_error(h.request_id, ErrorCode::kUnsupported, why, false);
  OptimizerConfig cfg;
  {
    std::lock_guard lock(sgd_mu_);  // before the slice's lock (the lock order, ps/server.h)
    cfg = config_.sgd;
  }
  std::string why;
  {
    std::lock_guard lock(s.mu);
    why = set_state_locked(s, h, cfg, in.init);
  }
  if (!why.empty()) return peer.send_error(h.request_id, ErrorCode::kInvalidArgument, why, false);
  Header r;
  r.type = MsgType::kSetOptimizerStateReply;
  r.request_id = h.request_id;
  peer.send(r);
}

}  // namespace psrt::ps
