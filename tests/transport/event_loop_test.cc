#include "transport/event_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

namespace psrt::transport {
namespace {

using namespace std::chrono_literals;

TEST(EventLoop, RunsTasksFromManyThreadsInPostOrderPerThread) {
  EventLoop loop("test", 50us);
  loop.start();
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::vector<int>> seen(kThreads);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        loop.post([&, t, i] {
          EXPECT_TRUE(loop.in_loop());
          seen[t].push_back(i);
          ++done;
        });
      }
    });
  }
  for (auto& th : threads)
    th.join();
  loop.run_sync([] {});
  EXPECT_EQ(done.load(), kThreads * kEach);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i)
      ASSERT_EQ(seen[t][i], i);
  }
  loop.stop();
}

TEST(EventLoop, WakesFromSleepForPostsAndTimers) {
  EventLoop loop("test", 10us);
  loop.start();
  std::this_thread::sleep_for(20ms);  // asleep now
  std::promise<void> ran;
  loop.post([&] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(1s), std::future_status::ready);

  std::promise<std::chrono::steady_clock::time_point> fired;
  auto start = std::chrono::steady_clock::now();
  loop.run_sync([&] {
    loop.add_timer_on_loop(start + 50ms,
                           [&] { fired.set_value(std::chrono::steady_clock::now()); });
    auto never = loop.add_timer_on_loop(start + 10ms, [] { ADD_FAILURE() << "cancelled"; });
    loop.cancel_timer_on_loop(never);
  });
  auto f = fired.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_GE(f.get() - start, 50ms);
  loop.stop();
}

TEST(EventLoop, TasksPostedAfterStopStillRun) {
  EventLoop loop("test", 10us);
  loop.start();
  loop.stop();
  bool ran = false;
  loop.post([&] { ran = true; });
  EXPECT_TRUE(ran) << "a completion posted to a stopped loop must not be lost";
}

}  // namespace
}  // namespace psrt::transport
