// Other programs psbench suite runs on this host (psrun, ucx_perftest), each bounded in time,
// started by runtime/launch/spawn.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/launch/spawn.h"

namespace psrt::bench {

// Environment changes for a child: {name, value} sets, {name, nullopt} removes.
using EnvChanges = launch::EnvChanges;

struct CommandOutput {
  int exit_code = -1;      // 128 + signal when a signal ended it
  bool timed_out = false;  // it was stopped at the deadline
  std::string out;         // stdout and stderr together
};

// Runs argv (argv[0] looked up in PATH) with `env` applied to ours, output captured. Past
// `timeout` it gets SIGTERM (psrun forwards it to its job), 10 s later SIGKILL. Throws
// psrt::Error(kSystem) when it cannot be started, naming argv[0].
CommandOutput run_bounded(const std::vector<std::string>& argv, const EnvChanges& env,
                          std::chrono::milliseconds timeout);

// A child left running in the background (output discarded), killed when this goes away.
class BackgroundCommand {
 public:
  BackgroundCommand(const std::vector<std::string>& argv, const EnvChanges& env);
  ~BackgroundCommand();
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;
  // Waits up to `timeout` for it to exit; true if it did.
  bool wait_exit(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
};

}  // namespace psrt::bench
