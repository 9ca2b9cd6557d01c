// Starting a process: the one fork/exec of psrt's tools. The launchers (child_process.h), the
// remote side of an ssh job (remote_side.h), psrun's ssh probes (ssh_reach.h) and psbench's
// children all start theirs here.
//
//   psrt::launch::SpawnRequest r;
//   r.argv = {"ssh", "-T", host, "true"};
//   r.out = r.err = psrt::launch::kNullFd;
//   const psrt::launch::Spawned s = psrt::launch::spawn(r);
//   if (s.failure) std::cerr << psrt::launch::describe(*s.failure, r.argv[0], r.cpus);
#pragma once

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace psrt::launch {

// For SpawnRequest::in/out/err: the child's descriptor is /dev/null, or the caller's own.
inline constexpr int kNullFd = -1;
inline constexpr int kInheritFd = -2;

// Environment changes on top of this process's environment: {name, value} sets (each set is
// added in order, after every variable of ours whose name the list does not hold), {name,
// nullopt} removes.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct SpawnRequest {
  std::vector<std::string> argv{};  // argv[0] is looked up in PATH when it has no '/'
  EnvChanges env{};
  // The child's stdin, stdout and stderr: a descriptor of the caller's (put there with dup2),
  // kNullFd or kInheritFd.
  int in = kNullFd;
  int out = kInheritFd;
  int err = kInheritFd;
  bool own_group = false;  // a new process group whose id is its pid
  // SIGKILL when the calling thread ends (PR_SET_PDEATHSIG): call from a thread that lives as
  // long as the child should. A child whose parent died before it could ask exits with 137.
  bool die_with_parent = false;
  std::vector<int> cpus{};  // bound to these CPUs (OS indexes) before exec; empty: unbound
  // The child's signal mask; nullptr: the calling thread's.
  const sigset_t* mask = nullptr;
  // Signals set to SIG_DFL in the child (those the caller ignores: exec keeps them ignored).
  std::span<const int> reset_to_default{};
};

// The step that failed and its errno.
struct SpawnFailure {
  enum class Step { kSetup, kFork, kDeathSignal, kGroup, kAffinity, kDup, kExec };
  Step step = Step::kSetup;
  int error = 0;
  std::string what{};  // kSetup: the call that failed in the parent ("pipe", "open /dev/null")
};

struct Spawned {
  pid_t pid = -1;                       // valid when failure is empty
  std::optional<SpawnFailure> failure;  // set: nothing is left running or to reap
};

// Starts `request` and returns once the child has exec'd its command or failed to (bounded: the
// child does nothing that blocks before exec). Descriptors of the caller other than the three
// given are not inherited. Safe to call while other threads run: the child makes only
// async-signal-safe calls between fork and exec. Throws std::out_of_range for an empty argv.
Spawned spawn(const SpawnRequest& request);

// For a user: "cannot run 'foo': No such file or directory", "cannot start 'foo': binding it to
// CPUs 1,2 failed: sched_setaffinity: ...".
std::string describe(const SpawnFailure& failure, const std::string& command,
                     const std::vector<int>& cpus);

}  // namespace psrt::launch
