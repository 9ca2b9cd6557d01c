#include "transport/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cassert>
#include <future>

#include "base/exception_status.h"
#include "base/log.h"
#include "base/sys_check.h"

namespace psrt::transport {

namespace {

// Runs one unit of the loop's work. The connections catch what their receivers throw; anything
// that still escapes (a completion or timer that throws, an allocation that fails) is logged,
// naming it, and the loop goes on: an exception leaving the progress thread would terminate the
// process with no word of the cause.
template <typename F>
void guarded(const std::string& loop, const char* what, F&& f) noexcept {
  try {
    f();
  } catch (...) {
    PSRT_LOG_ERROR("{}", current_exception_status(loop + ": " + what).message());
  }
}

}  // namespace

EventLoop::EventLoop(std::string name, std::chrono::microseconds spin)
    : name_(std::move(name)), spin_(spin) {
  epfd_ = PSRT_SYS_CHECK(::epoll_create1(EPOLL_CLOEXEC));
  wake_fd_ = PSRT_SYS_CHECK(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

EventLoop::~EventLoop() {
  stop();
  ::close(wake_fd_);
  ::close(epfd_);
}

void EventLoop::start(Hooks hooks) {
  hooks_ = std::move(hooks);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0 = wake fd
  PSRT_SYS_CHECK(::epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev));
  running_ = true;
  {
    std::lock_guard lock(task_mutex_);
    accepting_ = true;
  }
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &started] {
    thread_id_ = std::this_thread::get_id();
    started.set_value();
    run();
  });
  ready.wait();
}

void EventLoop::stop() {
  if (!thread_.joinable()) return;
  assert(!in_loop());
  running_ = false;
  wake();
  thread_.join();
  thread_id_ = std::thread::id{};
  std::vector<Task> rest;
  {
    std::lock_guard lock(task_mutex_);
    accepting_ = false;
    rest.swap(tasks_);
  }
  for (auto& t : rest)
    t();
}

void EventLoop::wake() {
  if (hooks_.wake) {
    hooks_.wake();
    return;
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

void EventLoop::post(Task task) {
  {
    std::unique_lock lock(task_mutex_);
    if (!accepting_) {
      lock.unlock();
      task();
      return;
    }
    tasks_.push_back(std::move(task));
    has_tasks_.store(true, std::memory_order_seq_cst);
  }
  // Pairs with the loop's store to sleeping_ before its last look at tasks_: either the loop
  // sees the task, or we see it asleep and wake it.
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

void EventLoop::defer(Task task) {
  if (in_loop()) {
    local_.push_back(std::move(task));
  } else {
    post(std::move(task));
  }
}

void EventLoop::complete(Completion done, Status status) {
  if (in_loop()) {
    completions_.emplace_back(std::move(done), std::move(status));
  } else {
    post([d = std::move(done), st = std::move(status)] { d(st); });
  }
}

void EventLoop::run_sync(const Task& task) {
  assert(!in_loop());
  std::promise<void> done;
  auto f = done.get_future();
  post([&] {
    try {
      task();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  f.get();
}

void EventLoop::add_fd_on_loop(int fd, std::uint32_t events, FdCallback cb) {
  assert(in_loop() || !running_);
  std::uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  PSRT_SYS_CHECK(::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev));
  fds_[fd] = FdEntry{token, std::make_shared<FdCallback>(std::move(cb))};
  token_to_fd_[token] = fd;
}

void EventLoop::set_events_on_loop(int fd, std::uint32_t events) {
  assert(in_loop());
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second.token;
  PSRT_SYS_CHECK(::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev));
}

void EventLoop::remove_fd_on_loop(int fd) {
  assert(in_loop() || !running_);
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  token_to_fd_.erase(it->second.token);
  fds_.erase(it);
}

std::uint64_t EventLoop::add_timer_on_loop(Clock::time_point when, Task fn) {
  std::uint64_t id = next_timer_++;
  timers_.emplace(when, std::make_pair(id, std::move(fn)));
  return id;
}

void EventLoop::cancel_timer_on_loop(std::uint64_t id) {
  for (auto it = timers_.begin(); it != timers_.end(); ++it) {
    if (it->second.first == id) {
      timers_.erase(it);
      return;
    }
  }
}

bool EventLoop::run_tasks() {
  std::vector<Task> batch;
  if (has_tasks_.load(std::memory_order_acquire)) {
    std::lock_guard lock(task_mutex_);
    batch.swap(tasks_);
    has_tasks_.store(false, std::memory_order_relaxed);
  }
  bool any = !batch.empty() || !local_.empty() || !completions_.empty();
  for (auto& t : batch)
    guarded(name_, "a posted task failed", t);
  // Deferred work may defer more; run until quiet but bounded so one chain cannot starve I/O.
  for (int round = 0; round < 64 && (!local_.empty() || !completions_.empty()); ++round) {
    if (!completions_.empty()) {
      std::vector<std::pair<Completion, Status>> now;
      now.swap(completions_);
      for (auto& [done, status] : now) {
        // Init-captures, not the bindings themselves: clang 14 cannot capture a binding.
        if (done) guarded(name_, "a completion failed", [&d = done, &s = status] { d(s); });
      }
      // Hand the capacity back so the steady state allocates nothing.
      if (completions_.empty()) {
        now.clear();
        completions_.swap(now);
      }
    }
    if (!local_.empty()) {
      std::vector<Task> now;
      now.swap(local_);
      for (auto& t : now)
        guarded(name_, "a deferred task failed", t);
    }
  }
  return any;
}

bool EventLoop::run_due_timers() {
  bool any = false;
  auto now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    auto task = std::move(timers_.begin()->second.second);
    timers_.erase(timers_.begin());
    guarded(name_, "a timer failed", task);
    any = true;
  }
  return any;
}

int EventLoop::sleep_timeout_ms() const {
  constexpr int kMaxSleepMs = 1000;
  if (timers_.empty()) return kMaxSleepMs;
  auto delta =
      std::chrono::duration_cast<std::chrono::milliseconds>(timers_.begin()->first - Clock::now())
          .count();
  if (delta <= 0) return 0;
  return static_cast<int>(std::min<long long>(delta + 1, kMaxSleepMs));
}

void EventLoop::run() {
  constexpr int kMaxEvents = 128;
  // With a poll hook (UCX), the fds in the epoll set are only listeners and liveness sockets:
  // while busy, look at them every kPollTurnsPerEpoll turns instead of paying a syscall each turn.
  constexpr int kPollTurnsPerEpoll = 64;
  epoll_event events[kMaxEvents];
  auto last_busy = Clock::now();
  int turn = 0;
  while (running_.load(std::memory_order_relaxed)) {
    bool busy = run_tasks();
    bool polled = false;
    if (hooks_.poll) guarded(name_, "progress failed", [&] { polled = hooks_.poll(); });
    if (polled) busy = true;
    if (!timers_.empty()) busy |= run_due_timers();
    if (busy) {
      last_busy = Clock::now();
      if (hooks_.poll && ++turn % kPollTurnsPerEpoll != 0) continue;
    }

    int timeout = 0;
    if (!busy && Clock::now() - last_busy >= spin_) {
      sleeping_.store(true, std::memory_order_seq_cst);
      bool can_sleep =
          local_.empty() && completions_.empty() && !has_tasks_.load(std::memory_order_seq_cst);
      if (can_sleep && hooks_.arm) can_sleep = hooks_.arm();
      timeout = can_sleep && running_ ? sleep_timeout_ms() : 0;
      if (timeout == 0) sleeping_.store(false, std::memory_order_relaxed);
    } else if (hooks_.poll && ++turn % kPollTurnsPerEpoll != 0) {
      continue;
    }
    int n = ::epoll_wait(epfd_, events, kMaxEvents, timeout);
    sleeping_.store(false, std::memory_order_relaxed);
    if (n < 0) {
      if (errno == EINTR) continue;
      PSRT_LOG_ERROR("{}: epoll_wait failed: {}", name_, errno_string(errno));
      break;
    }
    if (n > 0) last_busy = Clock::now();
    for (int i = 0; i < n; ++i) {
      std::uint64_t token = events[i].data.u64;
      if (token == 0) {
        std::uint64_t v;
        [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
        continue;
      }
      auto t = token_to_fd_.find(token);
      if (t == token_to_fd_.end()) continue;  // removed by an earlier callback in this batch
      auto f = fds_.find(t->second);
      std::shared_ptr<FdCallback> cb = f->second.cb;
      guarded(name_, "an event handler failed", [&] { (*cb)(events[i].events); });
    }
  }
  // Drain what was posted before stop() so that no completion is lost.
  run_tasks();
}

}  // namespace psrt::transport
