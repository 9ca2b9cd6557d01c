// ps/send_window.h: never more than the limit outstanding (a single larger send alone), every
// submitted send starts once the earlier ones are released, and queued sends start in priority
// order (then submission order), also when releases and submissions race on several threads.
#include "ps/send_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace psrt::ps {
namespace {

// Records what a window starts: (priority, bytes) in start order, and the outstanding bytes
// the window reported as each started (itself included).
struct Recorder {
  struct Started {
    std::uint64_t priority;
    std::size_t bytes;
    std::size_t outstanding;
  };
  std::mutex mu;
  std::vector<Started> started;
  std::deque<std::size_t> unreleased;  // started, not released yet, oldest first

  SendWindow::Start start(SendWindow& w, std::uint64_t priority, std::size_t bytes) {
    return [this, &w, priority, bytes] {
      std::lock_guard lock(mu);
      started.push_back({priority, bytes, w.outstanding()});
      unreleased.push_back(bytes);
    };
  }
  // Releases the oldest started send; false when none is outstanding.
  bool release_oldest(SendWindow& w) {
    std::size_t bytes = 0;
    {
      std::lock_guard lock(mu);
      if (unreleased.empty()) return false;
      bytes = unreleased.front();
      unreleased.pop_front();
    }
    w.release(bytes);
    return true;
  }
};

TEST(SendWindow, StartsWhatFitsAndQueuesTheRest) {
  SendWindow w(1000);
  Recorder r;
  w.submit(5, 400, r.start(w, 5, 400));
  w.submit(5, 600, r.start(w, 5, 600));  // 1000: exactly the limit
  w.submit(1, 1, r.start(w, 1, 1));      // one byte over: waits, whatever its priority
  ASSERT_EQ(r.started.size(), 2u);
  EXPECT_EQ(w.outstanding(), 1000u);
  EXPECT_EQ(w.queued(), 1u);
  EXPECT_EQ(r.started[1].outstanding, 1000u);
  w.release(400);
  ASSERT_EQ(r.started.size(), 3u);
  EXPECT_EQ(r.started[2].priority, 1u);
  EXPECT_EQ(w.outstanding(), 601u);
  EXPECT_EQ(w.queued(), 0u);
}

TEST(SendWindow, ASendLargerThanTheLimitLeavesAloneOnceNothingIsOutstanding) {
  SendWindow w(100);
  Recorder r;
  w.submit(0, 10, r.start(w, 0, 10));
  w.submit(1, 250, r.start(w, 1, 250));  // larger than the limit: waits for the 10
  w.submit(2, 10, r.start(w, 2, 10));    // behind it: waits too
  ASSERT_EQ(r.started.size(), 1u);
  w.release(10);
  ASSERT_EQ(r.started.size(), 2u);
  EXPECT_EQ(r.started[1].bytes, 250u);
  EXPECT_EQ(w.outstanding(), 250u);  // alone
  w.release(250);
  ASSERT_EQ(r.started.size(), 3u);
  EXPECT_EQ(w.outstanding(), 10u);
}

TEST(SendWindow, AQueuedSendNeverPassesOneOfHigherPriority) {
  SendWindow w(100);
  Recorder r;
  w.submit(9, 60, r.start(w, 9, 60));
  w.submit(1, 80, r.start(w, 1, 80));  // does not fit beside the 60
  w.submit(7, 30, r.start(w, 7, 30));  // would fit, but 1 goes first
  ASSERT_EQ(r.started.size(), 1u);
  w.release(60);
  ASSERT_EQ(r.started.size(), 2u);
  EXPECT_EQ(r.started[1].priority, 1u);
  w.release(80);
  ASSERT_EQ(r.started.size(), 3u);
  EXPECT_EQ(r.started[2].priority, 7u);
}

TEST(SendWindow, EqualPrioritiesStartInSubmissionOrder) {
  SendWindow w(10);
  std::vector<int> order;
  w.submit(3, 10, [&] { order.push_back(0); });
  for (int i = 1; i < 6; ++i)
    w.submit(3, 10, [&order, i] { order.push_back(i); });
  for (int i = 0; i < 6; ++i)
    w.release(10);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(w.outstanding(), 0u);
}

TEST(SendWindow, RandomSizesAndPrioritiesKeepTheBoundAndTheOrder) {
  std::mt19937_64 rng(20261126);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t limit = 1 + rng() % 5000;
    SendWindow w(limit);
    Recorder r;
    std::vector<std::pair<std::uint64_t, std::size_t>> queued_now;  // what waits, mirrored
    std::size_t submitted = 0;
    for (int step = 0; step < 400; ++step) {
      if (rng() % 3 != 0) {
        const std::uint64_t p = rng() % 20;
        const std::size_t b = 1 + rng() % (limit + limit / 4);  // some above the limit
        const std::size_t before = r.started.size();
        w.submit(p, b, r.start(w, p, b));
        ++submitted;
        if (r.started.size() == before) queued_now.emplace_back(p, b);
      } else {
        const std::size_t before = r.started.size();
        r.release_oldest(w);
        // What started now came off the queue lowest priority first.
        for (std::size_t i = before; i < r.started.size(); ++i) {
          auto lowest = std::min_element(queued_now.begin(), queued_now.end(),
                                         [](auto& a, auto& b) { return a.first < b.first; });
          ASSERT_NE(lowest, queued_now.end());
          EXPECT_EQ(r.started[i].priority, lowest->first) << "trial " << trial;
          queued_now.erase(lowest);
        }
      }
    }
    while (r.release_oldest(w)) {
    }
    EXPECT_EQ(r.started.size(), submitted) << "every send started";
    EXPECT_EQ(w.outstanding(), 0u);
    EXPECT_EQ(w.queued(), 0u);
    for (const auto& s : r.started)
      EXPECT_TRUE(s.outstanding <= limit || s.outstanding == s.bytes)
          << "outstanding " << s.outstanding << " over the limit " << limit;
  }
}

TEST(SendWindow, ASendThatFailsAtOnceReleasesInsideItsStart) {
  SendWindow w(100);
  int started = 0;
  for (int i = 0; i < 50; ++i)
    w.submit(static_cast<std::uint64_t>(i), 100, [&] {
      ++started;
      w.release(100);  // e.g. the connection is closed: fails and frees its bytes at once
    });
  EXPECT_EQ(started, 50);
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(w.queued(), 0u);
}

TEST(SendWindow, AStartThatThrowsFreesItsBytes) {
  SendWindow w(100);
  int started = 0;
  w.submit(0, 100, [] { throw std::runtime_error("broken"); });
  w.submit(1, 100, [&] { ++started; });
  EXPECT_EQ(started, 1);
  EXPECT_EQ(w.outstanding(), 100u);
}

TEST(SendWindow, ThreadsSubmittingAndReleasingKeepTheBound) {
  constexpr std::size_t kLimit = 1000;
  SendWindow w(kLimit);
  std::atomic<std::size_t> max_seen{0};
  std::atomic<int> started{0};
  std::mutex mu;
  std::deque<std::size_t> unreleased;
  auto start = [&](std::size_t bytes) {
    return [&, bytes] {
      const std::size_t now = w.outstanding();
      std::size_t seen = max_seen.load();
      while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {
      }
      started.fetch_add(1);
      std::lock_guard lock(mu);
      unreleased.push_back(bytes);
    };
  };
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < kEach; ++i) {
        const std::size_t b = 1 + rng() % 400;
        w.submit(rng() % 8, b, start(b));
        std::size_t bytes = 0;
        {
          std::lock_guard lock(mu);
          if (!unreleased.empty()) {
            bytes = unreleased.front();
            unreleased.pop_front();
          }
        }
        if (bytes) w.release(bytes);
      }
    });
  for (auto& t : threads)
    t.join();
  for (;;) {  // drain what is left (bounded: every release starts at least one or empties)
    std::size_t bytes = 0;
    {
      std::lock_guard lock(mu);
      if (unreleased.empty()) break;
      bytes = unreleased.front();
      unreleased.pop_front();
    }
    w.release(bytes);
  }
  EXPECT_EQ(started.load(), kThreads * kEach);
  EXPECT_LE(max_seen.load(), kLimit);
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(w.queued(), 0u);
}

TEST(SendWindow, TheDefaultDependsOnTheTransportAndAValueWins) {
  EXPECT_EQ(send_window_for(-1, true), 262144u);
  EXPECT_EQ(send_window_for(-1, false), 0u);
  EXPECT_EQ(send_window_for(0, true), 0u);
  EXPECT_EQ(send_window_for(524288, false), 524288u);
}

}  // namespace
}  // namespace psrt::ps
