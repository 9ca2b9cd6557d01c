// psrun's command line: every flag (docs/tools.md) into Args, and the checks and the default
// job that follow parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/psrun/elastic_options.h"
#include "tools/psrun/fault_options.h"
#include "tools/psrun/launch_options.h"
#include "tools/psrun/observe.h"
#include "tools/psrun/ssh_options.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct Args {
  std::string transport;
  int workers = 1;
  int servers = 1;
  std::string mode = "sync";
  int staleness = 0;
  std::string optimizer = "sgd";  // sgd | adam | adamw
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  std::string betas = "0.9,0.999";  // Adam/AdamW
  float eps = 1e-8f;
  float max_grad_norm = 0.f;
  bool skip_nonfinite = false;
  std::string aggregate = "mean";
  std::size_t partition_bytes = std::size_t{4} << 20;
  bool partition_given = false;  // --partition-bytes on the command line
  // PSRT_SEND_WINDOW handed to every process when not 0 (tools/psrun/pacing.h sets it).
  std::size_t send_window = 0;
  // --sharding (PSRT_SHARDING): balanced, or fixed; default balanced unless --partition-bytes
  // is given.
  std::string sharding;
  bool balanced_cut = true;
  std::string checkpoint_dir;
  std::uint64_t checkpoint_every = 0;
  int port = 0;
  std::string secret_file;
  bool secure = false;
  std::string launcher = "local";
  std::string interface;  // --interface NAME|CIDR (or PSRT_INTERFACE)
  SshFlags ssh;
  EngineFlags engine;    // --mpirun-args, --srun-args
  FaultFlags fault;      // --on-worker-loss
  ObserveFlags observe;  // --metrics-port, --link-gbps, --report, --json
  ElasticFlags elastic;  // --backup-workers
  int server_threads = 1;
  int replicas = 1;  // --replicas: 2 keeps every slice on a backup server too
  std::string server_device = "cpu";
  std::string bind;        // --bind none|numa|core (default PSRT_BIND, else auto)
  bool preflight = false;  // --preflight: check this host for the job and exit
  // Internal, for the hosts of an ssh job's preflight: the name for the table, and the
  // scheduler's address to connect to (with --port) instead of listening.
  std::string preflight_host, preflight_reach;
  std::vector<std::string> env;  // --env NAME[=VALUE] (tools/psrun/env_forward.h)
  std::vector<std::string> command;
};

// Registers every flag of psrun on `app`, parsed into `a`; --help-env into `help_env`.
void add_options(CLI::App& app, Args& a, bool& help_env);

// After parsing: the default job when no COMMAND was given (pstrain next to `self_exe`) and the
// checks across flags that CLI11 cannot express. Returns psrun's exit status when it must stop
// (a message on stderr), else nullopt.
std::optional<int> finish_options(const CLI::App& app, Args& a, const std::string& self_exe);

}  // namespace psrt::psrun
