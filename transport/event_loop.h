// The progress thread every backend runs on: an epoll set plus a task queue, which busy-polls for
// `spin` after its last event and then sleeps in epoll_wait, so an idle process burns no core.
// A backend with its own progress engine (UCX) plugs in through Hooks: poll() is called every
// turn, arm() right before sleeping (return false when events are pending and it must not sleep),
// and wake() replaces the default eventfd write that interrupts the sleep.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "psrt/error.h"

namespace psrt::transport {

class EventLoop {
 public:
  using Task = std::function<void()>;
  using FdCallback = std::function<void(std::uint32_t events)>;
  using Clock = std::chrono::steady_clock;

  struct Hooks {
    std::function<bool()> poll;  // returns true if it made progress
    std::function<bool()> arm;   // returns false when it cannot sleep now
    std::function<void()> wake;  // thread-safe; interrupts a sleeping epoll_wait
  };

  EventLoop(std::string name, std::chrono::microseconds spin);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void start(Hooks hooks = {});
  // Joins the thread and runs every task posted until then. Idempotent. Not from the loop thread.
  void stop();

  bool in_loop() const noexcept { return std::this_thread::get_id() == thread_id_.load(); }

  // Thread-safe: runs `task` on the loop thread, after whatever it is doing now. Once the loop
  // has stopped, runs it at once on the calling thread, so a completion is never lost.
  void post(Task task);
  // Runs `task` on the loop thread: now if called there (after the current callback returns),
  // else through post().
  void defer(Task task);
  // Runs `done(status)` on the loop thread after the current callback, like defer(), without
  // wrapping it in another std::function: the completion path of every send.
  using Completion = std::function<void(const Status&)>;
  void complete(Completion done, Status status);
  // Runs `task` on the loop and waits for it. Not from the loop thread.
  void run_sync(const Task& task);

  // Loop thread only ("OnLoop"). Level-triggered. The callback stays valid until removed; a
  // callback may remove its own or any other fd.
  void add_fd_on_loop(int fd, std::uint32_t events, FdCallback cb);
  void set_events_on_loop(int fd, std::uint32_t events);
  void remove_fd_on_loop(int fd);

  // Loop thread only. Runs `fn` once at `when`; returns an id for cancel_timer_on_loop.
  std::uint64_t add_timer_on_loop(Clock::time_point when, Task fn);
  void cancel_timer_on_loop(std::uint64_t id);

 private:
  void run();
  bool run_tasks();
  bool run_due_timers();
  int sleep_timeout_ms() const;
  void wake();

  struct FdEntry {
    std::uint64_t token;
    std::shared_ptr<FdCallback> cb;  // shared so a callback that removes itself stays alive
  };

  const std::string name_;
  const std::chrono::microseconds spin_;
  Hooks hooks_;
  int epfd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> running_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> has_tasks_{false};  // tasks_ is non-empty; lets the busy loop skip the lock

  std::mutex task_mutex_;
  std::vector<Task> tasks_;  // guarded by task_mutex_
  bool accepting_ = true;    // guarded by task_mutex_; false once stopped
  std::vector<Task> local_;  // loop thread only: deferred from inside callbacks
  std::vector<std::pair<Completion, Status>> completions_;  // loop thread only

  std::unordered_map<int, FdEntry> fds_;                // loop thread only
  std::unordered_map<std::uint64_t, int> token_to_fd_;  // loop thread only
  std::uint64_t next_token_ = 1;
  std::multimap<Clock::time_point, std::pair<std::uint64_t, Task>> timers_;  // loop thread only
  std::uint64_t next_timer_ = 1;
};

}  // namespace psrt::transport
