#include "ps/backup_log.h"

#include <fmt/core.h>

#include "base/log.h"

namespace psrt::ps {
namespace {

std::string join(std::span<const std::uint32_t> ranks) {
  std::string out;
  for (auto r : ranks)
    out += fmt::format("{}{}", out.empty() ? "" : ",", r);
  return out;
}

}  // namespace

void BackupLog::round(std::uint64_t key, std::uint32_t slice, std::uint64_t version,
                      std::span<const std::uint32_t> applied,
                      std::span<const std::uint32_t> left_out) {
  std::lock_guard lock(mu_);
  ++totals_.rounds;
  ++window_rounds_;
  for (auto r : applied)
    streak_.erase(r);
  if (!left_out.empty()) {
    ++totals_.short_rounds;
    ++window_short_;
    for (auto r : left_out) {
      ++totals_.left_out[r];
      ++window_left_out_[r];
      note_streak_locked(r, ++streak_[r]);
    }
    last_example_ = fmt::format("round {} of key {} slice {} ran with workers [{}] without [{}]",
                                version, key, slice, join(applied), join(left_out));
  }
  maybe_log_locked();
}

void BackupLog::dropped(std::uint32_t rank, std::uint64_t key, std::uint32_t slice,
                        std::uint64_t round) {
  std::lock_guard lock(mu_);
  ++totals_.dropped;
  ++totals_.dropped_by[rank];
  ++window_dropped_;
  if (last_example_.empty())
    last_example_ = fmt::format("worker {}'s push for round {} of key {} slice {} came late", rank,
                                round, key, slice);
  maybe_log_locked();
}

BackupLog::~BackupLog() {
  if (totals_.rounds == 0) return;
  std::string left, dropped;
  for (const auto& [rank, n] : totals_.left_out)
    left += fmt::format("{}worker {}: {}", left.empty() ? "" : ", ", rank, n);
  for (const auto& [rank, n] : totals_.dropped_by)
    dropped += fmt::format("{}worker {}: {}", dropped.empty() ? "" : ", ", rank, n);
  PSRT_LOG_INFO(
      "backup workers, job total: {} rounds, {} without some worker ({}); {} late pushes "
      "dropped ({})",
      totals_.rounds, totals_.short_rounds, left.empty() ? "none" : left, totals_.dropped,
      dropped.empty() ? "none" : dropped);
}

BackupLog::Totals BackupLog::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

void BackupLog::note_streak_locked(std::uint32_t rank, std::uint64_t streak) {
  std::uint64_t mark = 10;
  while (mark < streak)
    mark *= 100;
  if (streak != mark) return;
  PSRT_LOG_WARN(
      "worker {} was the last in the last {} rounds in a row: the job's straggler (backup "
      "workers keep the pace, but its gradients are dropped); check its host (load, a slow link, "
      "a slow data loader)",
      rank, streak);
}

void BackupLog::maybe_log_locked() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_line_ < interval_) return;
  if (window_left_out_.empty() && window_dropped_ == 0) return;
  std::string by_rank;
  for (const auto& [rank, n] : window_left_out_)
    by_rank += fmt::format("{}worker {}: {}", by_rank.empty() ? "" : ", ", rank, n);
  PSRT_LOG_INFO(
      "backup workers: {} of {} rounds ran without some worker ({}); {} late pushes dropped "
      "(job total {}); e.g. {}",
      window_short_, window_rounds_, by_rank.empty() ? "none" : by_rank, window_dropped_,
      totals_.dropped, last_example_);
  last_line_ = now;
  window_rounds_ = 0;
  window_short_ = 0;
  window_dropped_ = 0;
  window_left_out_.clear();
  last_example_.clear();
}

}  // namespace psrt::ps
