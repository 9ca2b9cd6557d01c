// The worker's side of a key's optimizer state (Worker::optimizer_state, set_optimizer_state:
// OPTIMIZER_STATE and SET_OPTIMIZER_STATE to every slice's server, ps/server_state.cc) and of
// job checkpoints on demand (Worker::request_checkpoint, ps/job_checkpoint.h).
#include <fmt/core.h>

#include <algorithm>

#include "ps/job_checkpoint.h"
#include "ps/session/protocol.h"
#include "ps/worker_impl.h"

namespace psrt {

namespace {

// What the slices' replies said, gathered as they arrive (under `mu`).
struct Gathered {
  std::mutex mu;
  std::vector<float> part1, part2;  // the whole key's parts, each slice's at its offset
  std::vector<ps::StateKind> kinds;
  std::vector<std::uint64_t> steps;
  std::uint64_t version = ~std::uint64_t{0};
};

OptimizerState assemble_state(Key key, Gathered& g) {
  std::lock_guard lock(g.mu);
  OptimizerState out;
  out.version = g.version;
  const ps::StateKind kind = g.kinds.front();
  for (std::size_t i = 0; i < g.kinds.size(); ++i)
    if (g.kinds[i] != kind || g.steps[i] != g.steps.front())
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("key {}: its slices hold different optimizer states (slice 0: {} "
                              "after {} steps, slice {}: {} after {} steps; a skipped non-finite "
                              "step skips a slice alone): torch's state has one per tensor",
                              key, static_cast<int>(kind), g.steps.front(), i,
                              static_cast<int>(g.kinds[i]), g.steps[i]));
  if (kind == ps::StateKind::kNone) return out;
  out.momentum = std::move(g.part1);
  if (kind == ps::StateKind::kAdam) {
    out.exp_avg_sq = std::move(g.part2);
    out.steps = g.steps.front();
  }
  return out;
}

}  // namespace

void Worker::Impl::check_state_op(Key key, const char* op) const {
  check_open();
  if (replicas_ > 1)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} of key {}: not supported with --replicas 2 (a backup would not "
                            "hold what is loaded); checkpoint and resume such a job with psrun "
                            "--checkpoint-dir (docs/checkpoints.md)",
                            op, key));
}

OptimizerState Worker::Impl::optimizer_state(Key key) {
  check_state_op(key, "optimizer_state()");
  const auto l = layout(key, 0);  // kNotFound from the scheduler for a key never initialised
  const auto& slices = l->slices;
  auto g = std::make_shared<Gathered>();
  g->part1.assign(l->total, 0.f);
  g->part2.assign(l->total, 0.f);
  g->kinds.assign(slices.size(), ps::StateKind::kNone);
  g->steps.assign(slices.size(), 0);
  auto st = std::make_shared<detail::HandleState>(static_cast<int>(2 * slices.size()),
                                                  options_.op_timeout,
                                                  fmt::format("OPTIMIZER_STATE of key {}", key));
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const auto& s = slices[i];
    for (std::uint32_t part = 1; part <= 2; ++part) {
      ps::Header h;
      h.type = ps::MsgType::kOptimizerState;
      h.dtype = ps::WireType::kF32;
      h.key = key;
      h.offset = s.offset;
      h.count = s.count;
      h.total = l->total;
      h.set_slice(s.index);
      h.set_part(part);
      auto& server = *servers_[s.server];
      float* into = (part == 1 ? g->part1 : g->part2).data() + s.offset;
      const auto id = requests_.add(
          server, fmt::format("OPTIMIZER_STATE of key {} slice {}", key, s.index),
          [st, g, i](const Status& status, const ps::Header& reply, std::span<const std::byte>) {
            if (status.ok()) {
              std::lock_guard lock(g->mu);
              g->kinds[i] = static_cast<ps::StateKind>(reply.state_kind());
              g->steps[i] = reply.total;
              g->version = std::min(g->version, reply.round);
            }
            st->complete_part(status);
          },
          {into, s.count * sizeof(float)});
      h.request_id = id;
      server.send(h, {}, [this, id, st](const Status& status) {
        st->sent_part();
        if (!status.ok()) requests_.fail(id, status);
      });
    }
  }
  Handle(st).wait();
  return assemble_state(key, *g);
}

void Worker::Impl::set_optimizer_state(Key key, const OptimizerState& state) {
  check_state_op(key, "set_optimizer_state()");
  const auto l = layout(key, 0);  // kNotFound from the scheduler for a key never initialised
  const auto& slices = l->slices;
  const std::vector<float>* parts[2] = {&state.momentum, &state.exp_avg_sq};
  for (const auto* p : parts)
    if (!p->empty() && p->size() != l->total)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("set_optimizer_state() of key {}: a state part of {} values for a "
                              "key of {} elements",
                              key, p->size(), l->total));
  if (state.momentum.empty() && !state.exp_avg_sq.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("set_optimizer_state() of key {}: exp_avg_sq without exp_avg "
                            "(OptimizerState::momentum)",
                            key));
  const int per_slice = state.exp_avg_sq.empty() ? 1 : 2;
  if (state.momentum.empty()) return;  // no state: nothing to store
  auto st = std::make_shared<detail::HandleState>(
      per_slice * static_cast<int>(slices.size()), options_.op_timeout,
      fmt::format("SET_OPTIMIZER_STATE of key {}", key));
  for (const auto& s : slices)
    for (std::uint32_t part = 1; part <= static_cast<std::uint32_t>(per_slice); ++part) {
      ps::Header h;
      h.type = ps::MsgType::kSetOptimizerState;
      h.dtype = ps::WireType::kF32;
      h.key = key;
      h.offset = s.offset;
      h.count = s.count;
      h.total = l->total;
      h.round = state.steps;
      h.set_slice(s.index);
      h.set_part(part);
      auto& server = *servers_[s.server];
      const auto id =
          requests_.add(server, fmt::format("SET_OPTIMIZER_STATE of key {} slice {}", key, s.index),
                        [st](const Status& status, const ps::Header&, std::span<const std::byte>) {
                          st->complete_part(status);
                        },
                        {});
      h.request_id = id;
      const ConstBuffer b{parts[part - 1]->data() + s.offset, s.count * sizeof(float)};
      server.send(h, {&b, 1}, [this, id, st](const Status& status) {
        st->sent_part();
        if (!status.ok()) requests_.fail(id, status);
      });
    }
  // The payloads are read in place: wait until every one has left, whatever the replies say.
  const Handle done(st);
  try {
    done.wait();
  } catch (...) {
    done.wait_sent_for(options_.op_timeout);
    throw;
  }
  done.wait_sent_for(options_.op_timeout);
}

void Worker::Impl::request_checkpoint(std::uint64_t round) {
  check_open();
  if (options_.checkpoint_dir.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("request_checkpoint({}): the job has no checkpoint directory; start "
                            "it with psrun --checkpoint-dir DIR (PSRT_CHECKPOINT_DIR)",
                            round));
  if (round == 0)
    throw Error(ErrorCode::kInvalidArgument,
                "request_checkpoint(0): round 0 is the initial weights; ask for a round >= 1");
  ps::request_checkpoint(options_.checkpoint_dir, round);
}

// --- the public Worker ---

OptimizerState Worker::optimizer_state(Key key) {
  return impl_->optimizer_state(key);
}
void Worker::set_optimizer_state(Key key, const OptimizerState& state) {
  impl_->set_optimizer_state(key, state);
}
void Worker::request_checkpoint(std::uint64_t round) {
  impl_->request_checkpoint(round);
}

}  // namespace psrt
