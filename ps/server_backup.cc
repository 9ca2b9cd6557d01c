// Backup workers (psrun --backup-workers b, docs/elastic.md): in sync mode a slice's round runs
// once all but b live workers' gradients are queued for it. So that no round mixes two rounds'
// gradients, each gradient carries the round it was computed for: one after the version of the
// slice that its worker last pulled. A gradient whose round already ran is late: dropped, counted
// as consumed (its worker's pull is answered with the newer weights at once) and reported in that
// pull reply (Header::late_dropped) and in the server's log (BackupLog).
#include <fmt/core.h>

#include <algorithm>

#include "base/log.h"
#include "ps/backup_log.h"
#include "ps/server.h"

namespace psrt::ps {

std::unique_ptr<BackupLog> Server::make_backup_log(const ServerConfig& config) {
  if (config.backup_workers == 0) return nullptr;
  if (config.mode != Mode::kSync)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PSRT_BACKUP_WORKERS={} needs PSRT_MODE=sync, not {}",
                            config.backup_workers, to_string(config.mode)));
  return std::make_unique<BackupLog>();
}

Server::WorkerState& Server::add_worker_locked(Slice& s, std::uint32_t rank) {
  auto& w = s.workers[rank];
  w.next_round = s.version + 1;
  return w;
}

void Server::tag_push_locked(WorkerState& w, GradBuf& g) const {
  if (!backup_log_) return;
  g.round = w.next_round++;
}

void Server::drop_late_locked(Slice& s) {
  if (!backup_log_) return;
  for (auto& [rank, w] : s.workers) {
    while (!w.queued.empty() && w.queued.front().round <= s.version) {
      GradBuf g = std::move(w.queued.front());
      w.queued.pop_front();
      ++w.applied;  // consumed: the pull that waits for it is answered
      ++w.dropped;
      backup_log_->dropped(rank, s.key, s.index, g.round);
      // A PUSH_IPC is acknowledged once its gradient will not be read any more.
      if (const auto* ipc = std::get_if<IpcGrad>(&g.where); ipc && ipc->ack_peer) {
        Header ack;
        ack.type = MsgType::kPushAck;
        ack.request_id = ipc->ack_request;
        ipc->ack_peer->send(ack);
      }
      if (g.reusable() && s.free.size() < s.workers.size() + 2) s.free.push_back(std::move(g));
    }
  }
}

void Server::note_reply_locked(Slice& s, PullWaiter& pw) const {
  auto w = s.workers.find(pw.rank);
  pw.round_workers = s.round_workers;
  pw.late_dropped = w == s.workers.end() ? 0 : std::exchange(w->second.dropped, 0);
  // The worker computes its next gradient from this version, unless pushes of it are still to
  // be applied (it pushed ahead without pulling): those keep their numbering.
  if (backup_log_ && w != s.workers.end() && w->second.queued.empty() &&
      w->second.applied >= w->second.received)
    w->second.next_round = std::max(w->second.next_round, pw.version + 1);
}

WorkerClock Server::clock_locked(const Slice& s, std::uint32_t rank, const WorkerState& w) const {
  WorkerClock c{rank, w.queued.size(), w.applied};
  if (backup_log_ && !w.queued.empty()) c.current = w.queued.front().round == s.version + 1;
  return c;
}

void Server::note_round_locked(Slice& s, const Update& u, std::uint64_t version) {
  s.round_workers = static_cast<std::uint32_t>(u.ranks.size());
  if (!backup_log_) return;
  std::vector<std::uint32_t> left_out;
  for (const auto& [rank, w] : s.workers)
    if (!std::binary_search(u.ranks.begin(), u.ranks.end(), rank)) left_out.push_back(rank);
  backup_log_->round(s.key, s.index, version, u.ranks, left_out);
}

}  // namespace psrt::ps
