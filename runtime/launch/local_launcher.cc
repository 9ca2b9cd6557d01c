#include "runtime/launch/local_launcher.h"

#include <poll.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "psrt/error.h"
#include "runtime/launch/child_process.h"
#include "runtime/launch/line_relay.h"
#include "runtime/launch/signal_watch.h"

namespace psrt::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The poll() timeout when no deadline is nearer: a missed SIGCHLD (another thread of psrun
// changing its disposition) costs at most this much.
constexpr milliseconds kPollBackstop{200};
// After SIGKILL, how long to wait for the kernel to end a process before giving up on it (only a
// process stuck in uninterruptible sleep takes this long).
constexpr milliseconds kKillWait{5'000};
// How often a relay process (ProcessSpec::relay) gets a keepalive line on its stdin.
constexpr milliseconds kKeepalive{1'000};
// The most stdin_data a spec may carry: it is written whole into an empty pipe.
constexpr std::size_t kMaxStdinData = 60'000;

using detail::ExitStatus;
using detail::LineRelay;

struct Child {
  const ProcessSpec* spec;
  bool worker;
  pid_t pid;  // also its process group id
  LineRelay out;
  LineRelay err;
  std::optional<ExitStatus> exit;  // set once seen; the child stays a zombie until finish()
  bool reaped = false;
  detail::UniqueFd stdin_write;  // spec->stdin_data: psrun's end of its stdin
  Clock::time_point next_keepalive{};

  std::string who() const { return spec->label + " (pid " + std::to_string(pid) + ")"; }
};

void validate(const JobSpec& job) {
  for (const auto* group : {&job.services, &job.workers}) {
    for (const ProcessSpec& spec : *group) {
      if (spec.argv.empty() || spec.argv.front().empty()) {
        throw Error(ErrorCode::kInvalidArgument, spec.label + ": empty command");
      }
      if (spec.stdin_data.size() > kMaxStdinData || (spec.relay && spec.stdin_data.empty())) {
        throw Error(ErrorCode::kInvalidArgument,
                    spec.label + ": stdin_data must be 1 to 60000 bytes for a relay process");
      }
      for (const auto& [name, value] : spec.env) {
        if (name.empty() || name.find('=') != std::string::npos) {
          throw Error(ErrorCode::kInvalidArgument,
                      spec.label + ": bad environment variable name '" + name + "'");
        }
      }
    }
  }
  if (job.service_grace.count() < 0 || job.kill_grace.count() < 0) {
    throw Error(ErrorCode::kInvalidArgument, "service_grace and kill_grace must be >= 0");
  }
}

// One job from start to end. Exits are observed with waitid(WNOWAIT) and children are reaped only
// at the very end: a zombie keeps its pid, so its process group id cannot be reused by an
// unrelated process while this still signals that group.
class JobRun {
 public:
  JobRun(const JobSpec& job, int out_fd, int err_fd, detail::SignalWatch& signals)
      : job_(job), out_fd_(out_fd), err_fd_(err_fd), signals_(signals) {
    ::pthread_sigmask(SIG_SETMASK, nullptr, &child_mask_);
    children_.reserve(job.services.size() + job.workers.size());
  }
  // Normally finish() has reaped everything; after an exception nothing may be left behind either.
  ~JobRun() {
    if (finished_) return;
    for (Child& child : children_) {
      if (child.reaped) continue;
      ::kill(-child.pid, SIGKILL);
      ::kill(child.pid, SIGKILL);
    }
    reap(Clock::now() + kKillWait);
  }
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  int run() {
    start_all();
    if (phase_ == Phase::kRunning) maybe_workers_done();
    while (!all_exited()) {
      const auto now = Clock::now();
      if (has_deadline() && now >= deadline_ && !on_deadline()) break;
      wait_for_events();
      observe_exits();
      handle_signals();
      send_keepalives();
    }
    finish();
    return result_;
  }

 private:
  enum class Phase {
    kRunning,   // workers running; deadline_ only once a service has exited with status 0
    kDraining,  // every worker exited 0; services have until deadline_ to exit
    kStopping,  // SIGTERM (or the forwarded signal) sent; SIGKILL at deadline_
    kKilling,   // SIGKILL sent; give up on the rest at deadline_
  };

  void start_all() {
    for (const auto* group : {&job_.services, &job_.workers}) {
      const bool workers = group == &job_.workers;
      for (const ProcessSpec& spec : *group) {
        // A service that failed at once (a port in use) or a signal ends the start-up here.
        observe_exits();
        handle_signals();
        if (phase_ != Phase::kRunning) return;
        detail::SpawnOutcome spawned = detail::spawn_child(spec, child_mask_, signals_.changed());
        if (!spawned.error.empty()) {
          report("psrun: " + spec.label + ": " + spawned.error);
          notify_stopping(spec.label + ": " + spawned.error);
          fail();
          return;
        }
        detail::SpawnedChild& c = spawned.child;
        children_.push_back(
            Child{&spec, workers, c.pid, LineRelay(std::move(c.stdout_read), prefix(spec), out_fd_),
                  LineRelay(std::move(c.stderr_read), prefix(spec), err_fd_), std::nullopt, false,
                  std::move(c.stdin_write), Clock::now() + kKeepalive});
      }
    }
  }

  static std::string_view prefix(const ProcessSpec& spec) {
    return spec.prefix_output ? std::string_view(spec.label) : std::string_view();
  }

  bool has_deadline() const { return phase_ != Phase::kRunning || early_service_.has_value(); }

  bool all_exited() const {
    return std::all_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.exit.has_value(); });
  }

  // Acts on the deadline of the current phase; false when there is nothing left to wait for.
  bool on_deadline() {
    switch (phase_) {
      case Phase::kRunning:
        fail_because(children_[*early_service_]);
        return true;
      case Phase::kDraining: {
        std::string names;
        bool several = false;
        for (const Child& child : children_) {
          if (child.exit) continue;
          several = !names.empty();
          names += (names.empty() ? "" : ", ") + child.who();
        }
        report("psrun: warning: " + names + " still running " +
               std::to_string(job_.service_grace.count()) +
               " ms after the last worker exited; stopping " + (several ? "them" : "it"));
        stop(SIGTERM);
        return true;
      }
      case Phase::kStopping:
        kill_all();
        return true;
      case Phase::kKilling:
        for (const Child& child : children_) {
          if (!child.exit) report("psrun: " + child.who() + " did not exit after SIGKILL");
        }
        return false;
    }
    return false;
  }

  // Blocks until output, a signal or the phase's deadline (bounded by kPollBackstop).
  void wait_for_events() {
    std::vector<pollfd> fds;
    std::vector<LineRelay*> relays;
    fds.push_back({signals_.wake_fd(), POLLIN, 0});
    for (Child& child : children_) {
      for (LineRelay* relay : {&child.out, &child.err}) {
        if (!relay->open()) continue;
        fds.push_back({relay->fd(), POLLIN, 0});
        relays.push_back(relay);
      }
    }
    auto timeout = kPollBackstop;
    if (has_deadline()) {
      const auto left = std::chrono::ceil<milliseconds>(deadline_ - Clock::now());
      timeout = std::clamp(left, milliseconds{0}, kPollBackstop);
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (n < 0 && errno != EINTR) ::poll(nullptr, 0, 10);  // ENOMEM: retry soon, without spinning
    if (n <= 0) return;  // the caller looks at exits and signals anyway
    if (fds[0].revents != 0) signals_.drain_wakeups();
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) relays[i - 1]->read_available();
    }
  }

  void observe_exits() {
    for (Child& child : children_) {
      if (child.exit) continue;
      siginfo_t info{};
      if (::waitid(P_PID, child.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != ECHILD) continue;
        // Reaped behind our back (another thread called wait()): its status is lost.
        child.reaped = true;
        child.exit = ExitStatus{.lost = true};
      } else if (info.si_pid == child.pid) {
        child.exit = ExitStatus{.signaled = info.si_code != CLD_EXITED, .code = info.si_status};
      } else {
        continue;
      }
      // What it wrote before exiting is in its pipes already: show it before any verdict.
      child.out.read_available();
      child.err.read_available();
      on_exit(child);
    }
  }

  void on_exit(const Child& child) {
    const ExitStatus& status = *child.exit;
    if (phase_ == Phase::kStopping || phase_ == Phase::kKilling) {
      // Killed by a signal psrun did not send: it died of its own cause, which may be what
      // stopped the job. Its peers can see it go (its connections close as it dies) and fail
      // before psrun sees it exit, and the first exit psrun saw is then one of theirs: say it.
      if (status.signaled && status.code != sent_signal_)
        report("psrun: " + child.who() + " " + detail::describe(status) +
               " (seen while stopping the job)");
      return;
    }
    if (child.worker) {
      if (!status.success() && !child.spec->may_fail) return fail_because(child);
      if (!status.success()) {
        if (++workers_failed_ == job_.workers.size()) return fail_because(child);
        report("psrun: " + child.who() + " " + detail::describe(status) +
               "; the job goes on without it (--on-worker-loss continue)");
        return maybe_workers_done();
      }
      ++workers_succeeded_;
      maybe_workers_done();
      return;
    }
    // A service the job survives losing: whether before or after the workers are done.
    if (!status.success() && child.spec->may_fail &&
        (phase_ == Phase::kRunning || phase_ == Phase::kDraining)) {
      report("psrun: " + child.spec->label + " (pid " + std::to_string(child.pid) +
             ") ended; the job goes on without it");
      return;
    }
    if (!status.success()) return fail_because(child);
    // A service that exits while workers still run fails the job even with status 0, unless the
    // workers all finish within service_grace: a scheduler that releases the workers from their
    // final barrier exits as they do, and may be seen first.
    if (phase_ == Phase::kRunning && !early_service_) {
      early_service_ = static_cast<std::size_t>(&child - children_.data());
      deadline_ = Clock::now() + job_.service_grace;
    }
  }

  void maybe_workers_done() {
    if (phase_ != Phase::kRunning || workers_succeeded_ + workers_failed_ != job_.workers.size() ||
        workers_succeeded_ == 0)
      return;
    if (job_.on_workers_done) {
      try {
        job_.on_workers_done();
      } catch (const std::exception& e) {
        report(std::string("psrun: telling the services that the workers are done failed: ") +
               e.what() + "; stopping the job");
        return fail();
      }
    }
    phase_ = Phase::kDraining;
    deadline_ = Clock::now() + job_.service_grace;
  }

  void handle_signals() {
    for (const int sig : signals_.take_received()) {
      if (result_ == 0) result_ = 128 + sig;
      if (phase_ == Phase::kRunning || phase_ == Phase::kDraining) {
        report("psrun: got " + detail::signal_name(sig) + "; forwarding it to every process");
        notify_stopping("got " + detail::signal_name(sig));
        stop(sig);
      } else if (phase_ == Phase::kStopping) {
        report("psrun: got " + detail::signal_name(sig) + " again; killing every process");
        kill_all();
      }
    }
  }

  void fail_because(const Child& child) {
    const ExitStatus& status = *child.exit;
    const bool ssh_failed =
        child.spec->relay && !status.signaled && !status.lost && status.code == 255;
    const std::string why = child.who() + " " + detail::describe(status) +
                            (ssh_failed ? " (ssh's own status: it could not reach " +
                                              child.spec->host + " or lost the connection)"
                                        : "");
    report("psrun: " + why + "; stopping the job");
    notify_stopping(why);
    fail();
  }

  void notify_stopping(const std::string& why) {
    if (stopping_notified_ || !job_.on_stopping) return;
    stopping_notified_ = true;
    try {
      job_.on_stopping(why);
    } catch (const std::exception& e) {
      report(std::string("psrun: warning: telling the job it stops failed: ") + e.what());
    }
  }

  void fail() {
    result_ = 1;
    stop(SIGTERM);
  }

  void stop(int sig) {
    sent_signal_ = sig;
    signal_all(sig);
    phase_ = Phase::kStopping;
    deadline_ = Clock::now() + job_.kill_grace;
  }

  void kill_all() {
    sent_signal_ = SIGKILL;
    signal_all(SIGKILL);
    phase_ = Phase::kKilling;
    deadline_ = Clock::now() + kKillWait;
  }

  // A keepalive line to every relay process that is due one: its remote side stops its process
  // when they stop coming (psrun gone, or the link to it).
  void send_keepalives() {
    const auto now = Clock::now();
    for (Child& child : children_) {
      if (!child.spec->relay || !child.stdin_write.valid() || child.exit ||
          now < child.next_keepalive)
        continue;
      write_stdin(child, "\n");
      child.next_keepalive = now + kKeepalive;
    }
  }

  // Best effort, never blocks: a full pipe means the relay is stuck, and its own timeout acts.
  static void write_stdin(Child& child, const std::string& line) {
    if (!child.stdin_write.valid()) return;
    const ssize_t n = ::write(child.stdin_write.get(), line.data(), line.size());
    if (n < 0 && errno == EPIPE) child.stdin_write.reset();
  }

  // Signals the group of every process, including those that have exited: what they started in
  // the background belongs to the job too. A relay process gets a signal other than SIGKILL as a
  // line for its remote side instead.
  void signal_all(int sig) {
    for (Child& child : children_) {
      if (child.reaped) continue;
      if (child.spec->relay && sig != SIGKILL && !child.exit && child.stdin_write.valid()) {
        std::string line = std::to_string(sig);
        line.insert(line.begin(), 'S');
        line += '\n';
        write_stdin(child, line);
        continue;
      }
      // A process that moved itself to another group still gets the signal.
      if (::kill(-child.pid, sig) != 0 && !child.exit) ::kill(child.pid, sig);
    }
  }

  void finish() {
    finished_ = true;
    signal_all(SIGKILL);
    for (Child& child : children_)
      child.stdin_write.reset();
    for (Child& child : children_) {
      child.out.finish();
      child.err.finish();
    }
    reap(Clock::now());
  }

  // Reaps every child that has exited; waits until `deadline` for the others.
  void reap(Clock::time_point deadline) {
    for (Child& child : children_) {
      while (!child.reaped) {
        int status;
        const pid_t rc = ::waitpid(child.pid, &status, WNOHANG);
        if (rc == child.pid || (rc < 0 && errno == ECHILD)) {
          child.reaped = true;
        } else if (rc == 0 && Clock::now() < deadline) {
          ::poll(nullptr, 0, 10);
        } else if (rc == 0 || errno != EINTR) {
          break;
        }
      }
    }
  }

  void report(const std::string& line) { detail::write_all(err_fd_, line + "\n"); }

  const JobSpec& job_;
  int out_fd_;
  int err_fd_;
  detail::SignalWatch& signals_;
  sigset_t child_mask_{};
  std::vector<Child> children_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_{};
  std::optional<std::size_t> early_service_;  // the first service to exit 0 during kRunning
  std::size_t workers_succeeded_ = 0;
  std::size_t workers_failed_ = 0;  // workers that failed (ProcessSpec::may_fail)
  int result_ = 0;
  bool finished_ = false;
  bool stopping_notified_ = false;
  int sent_signal_ = 0;  // the last signal stop() or kill_all() sent every process
};

}  // namespace

int LocalLauncher::run(const JobSpec& job) {
  validate(job);
  detail::SignalWatch signals;
  JobRun run(job, out_fd_, err_fd_, signals);
  return run.run();
}

}  // namespace psrt::launch
