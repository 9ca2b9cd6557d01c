// base/work_queue.h: items run in push order, stop() runs what was queued (and what a running
// item queues) and refuses pushes from elsewhere, and stop() is bounded by the queued work.
#include "base/work_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace psrt {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueue, OneThreadRunsItemsInPushOrder) {
  std::vector<int> seen;  // one thread: only it writes, stop() joins it before we read
  WorkQueue<int> q(1, [&](int& i) { seen.push_back(i); });
  for (int i = 0; i < 1000; ++i)
    ASSERT_TRUE(q.push(i));
  q.stop();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(seen[i], i);
}

TEST(WorkQueue, StopRunsEveryQueuedItemThenRefuses) {
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> ran{0};
  WorkQueue<int> q(2, [&](int&) {
    gate.wait_for(5s);  // bounded: the test releases it at once below
    ran.fetch_add(1);
  });
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(q.push(i));
  std::thread stopper([&] { q.stop(); });
  // stop() began (or is about to): a push from this thread is refused once it has.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (q.push(-1) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(q.push(-1)) << "a push after stop() began is refused";
  release.set_value();
  stopper.join();
  // Every item pushed before stop() began ran (the accepted -1s too), none twice.
  EXPECT_GE(ran.load(), 50);
  EXPECT_EQ(q.queued(), 0u);
  EXPECT_FALSE(q.push(1));
  q.stop();  // idempotent
}

TEST(WorkQueue, FollowUpPushedByARunningItemRunsDuringStop) {
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> ran{0};
  WorkQueue<int>* self = nullptr;
  WorkQueue<int> q(1, [&](int& depth) {
    if (depth < 0) return;  // the probes below
    if (depth == 0) gate.wait_for(5s);
    ran.fetch_add(1);
    if (depth < 10) {
      EXPECT_TRUE(self->push(depth + 1)) << "follow-up refused at depth " << depth;
    }
  });
  self = &q;
  ASSERT_TRUE(q.push(0));
  std::thread stopper([&] { q.stop(); });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (q.push(-1) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  release.set_value();  // stop() has begun: the chain 1..10 is pushed from the queue's thread
  stopper.join();
  EXPECT_EQ(ran.load(), 11);  // 0..10: the chain finished before stop() returned
}

TEST(WorkQueue, StopIsBoundedByTheQueuedWork) {
  std::atomic<int> ran{0};
  WorkQueue<int> q(2, [&](int&) {
    std::this_thread::sleep_for(10ms);
    ran.fetch_add(1);
  });
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(q.push(i));
  const auto start = std::chrono::steady_clock::now();
  q.stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(ran.load(), 20);
  // 20 items of 10 ms on 2 threads: about 100 ms; far below a second even on a loaded machine.
  EXPECT_LT(took, 2s);
}

TEST(WorkQueue, EachThreadRunsOnStartBeforeItsItems) {
  std::mutex mu;
  std::vector<std::thread::id> started;
  std::atomic<bool> ok{true};
  WorkQueue<int> q(
      3,
      [&](int&) {
        std::lock_guard lock(mu);
        if (std::find(started.begin(), started.end(), std::this_thread::get_id()) == started.end())
          ok = false;
      },
      [&] {
        std::lock_guard lock(mu);
        started.push_back(std::this_thread::get_id());
      });
  for (int i = 0; i < 100; ++i)
    q.push(i);
  q.stop();
  EXPECT_TRUE(ok.load());
  EXPECT_EQ(started.size(), 3u);
}

}  // namespace
}  // namespace psrt
