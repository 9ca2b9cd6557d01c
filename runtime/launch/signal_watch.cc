#include "runtime/launch/signal_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "base/sys_check.h"
#include "psrt/error.h"

namespace psrt::launch::detail {
namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<bool> g_active{false};
std::atomic<int> g_wake_fd{-1};
std::atomic<unsigned> g_received{0};  // bit per forwarded signal number
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<unsigned>::is_always_lock_free,
              "used from a signal handler");
static_assert(SIGINT < 32 && SIGTERM < 32 && SIGHUP < 32);

void on_signal(int sig) {
  const int saved_errno = errno;
  if (sig != SIGCHLD) g_received.fetch_or(1U << sig);
  const int fd = g_wake_fd.load();
  const char byte = 0;
  // A full pipe already holds a wakeup; the flag above carries which signal it was.
  if (fd >= 0) (void)!::write(fd, &byte, 1);
  errno = saved_errno;
}

}  // namespace

SignalWatch::SignalWatch() {
  if (g_active.exchange(true)) {
    throw Error(ErrorCode::kInvalidArgument,
                "the local launcher is already running a job in this process: it owns SIGINT, "
                "SIGTERM, SIGHUP and SIGCHLD while it runs, so jobs must run one at a time");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    g_active.store(false);
    throw_system_error("pipe2 (launcher signal pipe)", err);
  }
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  g_received.store(0);
  g_wake_fd.store(wake_write_.get());

  struct sigaction handler {};
  handler.sa_handler = on_signal;
  handler.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigfillset(&handler.sa_mask);
  const auto install = [&](int sig, const struct sigaction& action, bool keep_if_ignored) {
    Saved saved{sig, {}};
    ::sigaction(sig, nullptr, &saved.action);
    if (keep_if_ignored && saved.action.sa_handler == SIG_IGN) return;
    ::sigaction(sig, &action, nullptr);
    saved_.push_back(saved);
    changed_.push_back(sig);
  };
  for (const int sig : kForwarded) {
    install(sig, handler, /*keep_if_ignored=*/true);
  }
  install(SIGCHLD, handler, /*keep_if_ignored=*/false);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  install(SIGPIPE, ignore, /*keep_if_ignored=*/true);
}

SignalWatch::~SignalWatch() {
  // Each signal appears once, so the order does not matter.
  for (const Saved& saved : saved_) {
    ::sigaction(saved.sig, &saved.action, nullptr);
  }
  g_wake_fd.store(-1);
  g_active.store(false);
}

void SignalWatch::drain_wakeups() {
  char buf[256];
  while (::read(wake_read_.get(), buf, sizeof(buf)) > 0) {
  }
}

std::vector<int> SignalWatch::take_received() {
  const unsigned bits = g_received.exchange(0);
  std::vector<int> out;
  for (const int sig : kForwarded) {
    if ((bits & (1U << sig)) != 0) out.push_back(sig);
  }
  return out;
}

}  // namespace psrt::launch::detail
