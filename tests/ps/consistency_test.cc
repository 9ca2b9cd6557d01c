// The consistency policies as one decision: which queued gradients form the next update.
#include "ps/consistency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "psrt/error.h"

namespace psrt::ps {
namespace {

using Ranks = std::vector<std::uint32_t>;

TEST(Consistency, SyncRunsOnceEveryLiveWorkerHasAGradient) {
  const std::vector<WorkerClock> all = {{0, 1, 4}, {2, 3, 4}, {5, 1, 4}};
  EXPECT_EQ(next_update(Mode::kSync, 0, all), (Ranks{0, 2, 5}));
  const std::vector<WorkerClock> one_missing = {{0, 1, 4}, {2, 0, 4}, {5, 2, 4}};
  EXPECT_EQ(next_update(Mode::kSync, 0, one_missing), Ranks{});
  const std::vector<WorkerClock> alone = {{3, 1, 0}};
  EXPECT_EQ(next_update(Mode::kSync, 0, alone), Ranks{3});
  // Staleness does not loosen sync.
  EXPECT_EQ(next_update(Mode::kSync, 100, one_missing), Ranks{});
}

TEST(Consistency, AsyncPicksTheFurthestBehindQueuedWorker) {
  // Rank 1 is furthest behind but has nothing queued; rank 2 is the furthest behind that has.
  const std::vector<WorkerClock> live = {{0, 1, 5}, {1, 0, 0}, {2, 1, 3}, {3, 4, 9}};
  EXPECT_EQ(next_update(Mode::kAsync, 0, live), Ranks{2});
  // Ties go to the lowest rank.
  const std::vector<WorkerClock> tie = {{0, 0, 1}, {4, 1, 2}, {6, 1, 2}};
  EXPECT_EQ(next_update(Mode::kAsync, 0, tie), Ranks{4});
  // Async ignores how far ahead a worker is.
  const std::vector<WorkerClock> ahead = {{0, 0, 0}, {1, 1, 1000}};
  EXPECT_EQ(next_update(Mode::kAsync, 0, ahead), Ranks{1});
  const std::vector<WorkerClock> idle = {{0, 0, 0}, {1, 0, 7}};
  EXPECT_EQ(next_update(Mode::kAsync, 0, idle), Ranks{});
}

TEST(Consistency, SspExcludesWorkersMoreThanKAheadOfTheSlowest) {
  // Slowest is rank 1 at 2 updates; K = 2 allows up to 4.
  const std::vector<WorkerClock> live = {{0, 1, 5}, {1, 0, 2}, {2, 1, 4}};
  EXPECT_EQ(next_update(Mode::kSsp, 2, live), Ranks{2});
  const std::vector<WorkerClock> only_fast = {{0, 1, 5}, {1, 0, 2}, {2, 0, 4}};
  EXPECT_EQ(next_update(Mode::kSsp, 2, only_fast), Ranks{})
      << "rank 0 is 3 ahead of the slowest with K = 2";
  EXPECT_EQ(next_update(Mode::kSsp, 3, only_fast), Ranks{0});
  // The slowest bounds everyone even when it has nothing queued.
  const std::vector<WorkerClock> slow_idle = {{0, 0, 0}, {1, 1, 3}};
  EXPECT_EQ(next_update(Mode::kSsp, 2, slow_idle), Ranks{});
  EXPECT_EQ(next_update(Mode::kSsp, 3, slow_idle), Ranks{1});
}

TEST(Consistency, SspWithZeroStalenessIsLockStep) {
  const std::vector<WorkerClock> ahead = {{0, 1, 1}, {1, 0, 0}};
  EXPECT_EQ(next_update(Mode::kSsp, 0, ahead), Ranks{});
  const std::vector<WorkerClock> level = {{0, 1, 0}, {1, 1, 0}};
  EXPECT_EQ(next_update(Mode::kSsp, 0, level), Ranks{0});
  const std::vector<WorkerClock> one_done = {{0, 1, 1}, {1, 1, 0}};
  EXPECT_EQ(next_update(Mode::kSsp, 0, one_done), Ranks{1});
}

// Workers 0 and 1 always have a gradient queued, workers 2 and 3 only every 4th step; each step
// applies whatever next_update picks. Returns the largest gap between two clocks seen. A worker
// may only run when it is at most K ahead of the slowest, so SSP keeps the gap within K + 1.
std::uint64_t max_spread(Mode mode, std::uint64_t staleness, int steps) {
  std::vector<WorkerClock> live = {{0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {3, 1, 0}};
  std::uint64_t spread = 0;
  for (int i = 0; i < steps; ++i) {
    // The fast workers (0 and 1) always have gradients; the slow ones only every 4th step.
    for (auto& w : live)
      w.queued = (w.rank < 2 || i % 4 == 0) ? 1 : 0;
    for (auto r : next_update(mode, staleness, live))
      ++live[r].applied;
    auto [lo, hi] = std::minmax_element(live.begin(), live.end(),
                                        [](auto& a, auto& b) { return a.applied < b.applied; });
    spread = std::max(spread, hi->applied - lo->applied);
  }
  return spread;
}

TEST(Consistency, SspBoundsTheSpreadOfClocks) {
  EXPECT_LE(max_spread(Mode::kSsp, 0, 400), 1u);
  EXPECT_LE(max_spread(Mode::kSsp, 3, 400), 4u);
  EXPECT_GT(max_spread(Mode::kAsync, 0, 400), 4u) << "async lets fast workers run ahead";
}

TEST(Consistency, NoLiveWorkersMeansNoUpdate) {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kSsp})
    EXPECT_EQ(next_update(m, 1, std::span<const WorkerClock>{}), Ranks{}) << to_string(m);
}

// Backup workers: a sync round runs with the first live - b current gradients, never with one
// for a later round, and b = 0 is plain sync.
TEST(Consistency, BackupWorkersRunARoundWithAllButBCurrentGradients) {
  std::vector<WorkerClock> live = {{0, 1, 5}, {1, 1, 5}, {2, 1, 5}, {3, 0, 4}};
  EXPECT_EQ(next_update(Mode::kSync, 0, live, 1), (Ranks{0, 1, 2}));
  EXPECT_EQ(next_update(Mode::kSync, 0, live, 0), Ranks{}) << "b = 0 waits for rank 3";
  EXPECT_EQ(next_update(Mode::kSync, 0, live, 2), (Ranks{0, 1, 2})) << "every current one";
  live[1].current = false;  // its gradient is for the round after
  EXPECT_EQ(next_update(Mode::kSync, 0, live, 1), Ranks{});
  EXPECT_EQ(next_update(Mode::kSync, 0, live, 2), (Ranks{0, 2}));
  // More backups than workers: a round still needs one gradient.
  std::vector<WorkerClock> one = {{7, 0, 0}};
  EXPECT_EQ(next_update(Mode::kSync, 0, one, 5), Ranks{});
  one[0].queued = 1;
  EXPECT_EQ(next_update(Mode::kSync, 0, one, 5), Ranks{7});
  EXPECT_EQ(backup_quorum(4, 1), 3u);
  EXPECT_EQ(backup_quorum(1, 1), 1u);
  EXPECT_EQ(backup_quorum(0, 0), 1u);
}

TEST(Consistency, BackupWorkersTheJobCannotRunAreRefusedNamingTheCause) {
  check_backup_workers(Mode::kAsync, 0, 1, 2);  // b = 0: nothing to check
  check_backup_workers(Mode::kSync, 3, 4, 1);
  auto refused = [](Mode m, std::uint32_t b, std::uint32_t n, std::uint32_t r,
                    const std::string& cause) {
    try {
      check_backup_workers(m, b, n, r);
      ADD_FAILURE() << "accepted: " << cause;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(cause), std::string::npos) << e.what();
    }
  };
  refused(Mode::kSsp, 1, 4, 1, "needs --mode sync");
  refused(Mode::kSync, 4, 4, 1, "use fewer backup workers than -n");
  refused(Mode::kSync, 1, 4, 2, "cannot be combined with --replicas 2");
}

TEST(Consistency, ModeNamesRoundTrip) {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kSsp})
    EXPECT_EQ(parse_mode(to_string(m)), m);
  EXPECT_EQ(to_string(Mode::kSync), "sync");
  EXPECT_EQ(to_string(Mode::kAsync), "async");
  EXPECT_EQ(to_string(Mode::kSsp), "ssp");
}

TEST(Consistency, ParseModeNamesTheAcceptedValues) {
  for (const char* bad : {"bsp", "SYNC", "", "ssp ", "asynchronous"}) {
    try {
      parse_mode(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("sync, async or ssp"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace psrt::ps
