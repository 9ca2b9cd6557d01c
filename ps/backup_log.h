// What backup workers cost the job (psrun --backup-workers, docs/elastic.md): per worker, the
// rounds that ran without it and its late pushes the server dropped, and the log lines that say
// so at a bounded rate. A worker left out of 10 rounds in a row (then 1000, 100000, ...) is
// named as the job's straggler. One per server; thread-safe (its mutex is a leaf).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace psrt::ps {

class BackupLog {
 public:
  // `interval`: at most one line per interval (each line sums up what happened since the last).
  explicit BackupLog(std::chrono::milliseconds interval = std::chrono::seconds(2))
      : interval_(interval) {}
  // Logs the job's totals (when a round ran).
  ~BackupLog();
  BackupLog(const BackupLog&) = delete;
  BackupLog& operator=(const BackupLog&) = delete;

  // Round `version` of key `key` slice `slice` ran with `applied` of the live workers, without
  // `left_out` (both ascending).
  void round(std::uint64_t key, std::uint32_t slice, std::uint64_t version,
             std::span<const std::uint32_t> applied, std::span<const std::uint32_t> left_out);
  // A push of worker `rank` for round `round` arrived after that round ran: dropped.
  void dropped(std::uint32_t rank, std::uint64_t key, std::uint32_t slice, std::uint64_t round);

  struct Totals {
    std::uint64_t rounds = 0;                           // updates applied
    std::uint64_t short_rounds = 0;                     // of them, run without some live worker
    std::uint64_t dropped = 0;                          // late pushes dropped
    std::map<std::uint32_t, std::uint64_t> left_out;    // by rank: rounds run without it
    std::map<std::uint32_t, std::uint64_t> dropped_by;  // by rank: its late pushes dropped
  };
  Totals totals() const;

 private:
  // Under mu_: writes the summary line when the interval has passed.
  void maybe_log_locked();
  // Under mu_: names `rank` when its streak of rounds run without it reaches 10, 1000, ...
  void note_streak_locked(std::uint32_t rank, std::uint64_t streak);

  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  Totals totals_;                                           // guarded by mu_
  std::uint64_t window_rounds_ = 0;                         // since the last line: mu_
  std::uint64_t window_short_ = 0;                          // mu_
  std::uint64_t window_dropped_ = 0;                        // mu_
  std::map<std::uint32_t, std::uint64_t> window_left_out_;  // mu_
  std::map<std::uint32_t, std::uint64_t> streak_;      // rounds in a row run without a rank: mu_
  std::string last_example_;                           // a short round of the window: mu_
  std::chrono::steady_clock::time_point last_line_{};  // mu_
};

}  // namespace psrt::ps
