// A fixed set of threads running the items pushed to a queue: the server's compute pool, the cuda
// server's reply thread and the worker's staging thread.
//
//   WorkQueue<Job> q(2, [](Job& j) { j.run(); });
//   q.push(job);  // false once stop() began
//   q.stop();     // runs what is queued, then joins (also run by the destructor)
//
// Order: items are taken in the order they were pushed; with one thread they run one at a time in
// that order. Stop: stop() refuses new pushes from other threads, lets the threads run every item
// queued (including the ones a running item pushes itself: follow-up work is never lost), then
// joins them. So stop() is bounded by the work queued before it. `run` must not throw (an item
// that can fail catches and reports its own error).
#pragma once

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace psrt {
namespace detail {
// The queue whose thread this is (null on other threads): lets a running item push follow-up
// work while stop() drains.
inline thread_local const void* current_work_queue = nullptr;
}  // namespace detail

template <class Item>
class WorkQueue {
 public:
  using Run = std::function<void(Item&)>;

  // Starts max(1, threads) threads; each runs `on_start` (if any) first, then items.
  WorkQueue(int threads, Run run, const std::function<void()>& on_start = {})
      : run_(std::move(run)) {
    try {
      for (int i = 0; i < std::max(1, threads); ++i)
        threads_.emplace_back([this, on_start] {
          detail::current_work_queue = this;
          if (on_start) on_start();
          loop();
        });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `item`. Thread-safe. False (and `item` dropped) once stop() began, unless called from
  // one of this queue's threads.
  bool push(Item item) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ && detail::current_work_queue != this) return false;
      queue_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }

  // Items queued and not yet taken by a thread.
  std::size_t queued() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

  // Refuses new items, runs the queued ones, joins the threads. Idempotent and thread-safe; not
  // from one of this queue's threads.
  void stop() {
    assert(detail::current_work_queue != this && "WorkQueue::stop() from its own thread");
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    std::lock_guard join(join_mu_);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::optional<Item> item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        item.emplace(std::move(queue_.front()));
        queue_.pop_front();
      }
      run_(*item);
    }
  }

  const Run run_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::mutex join_mu_;      // serialises joins of concurrent stop() calls; taken after mu_ is free
  std::vector<std::thread> threads_;  // written by the constructor only; last: started once
                                      // everything above exists
};

}  // namespace psrt
