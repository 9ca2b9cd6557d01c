// psrun: launches a psrt job — the scheduler (inside psrun), S servers and N copies of COMMAND —
// with the PSRT_* environment (psrun --help-env), prefixes their output, forwards SIGINT and
// SIGTERM, and stops everything when one process fails.
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "base/interfaces.h"
#include "base/log.h"
#include "device/cuda_device.h"
#include "ps/consistency.h"
#include "ps/scheduler.h"
#include "runtime/env_contract.h"
#include "runtime/job_secret.h"
#include "runtime/launch/factory.h"
#include "runtime/launch/host_assignment.h"
#include "runtime/launch/remote_side.h"
#include "runtime/launch/ssh_launcher.h"
#include "runtime/scheduler_process.h"
#include "runtime/server_process.h"
#include "runtime/worker_ranks.h"
#include "tools/psrun/bind.h"
#include "tools/psrun/checkpoint_signal.h"
#include "tools/psrun/env_forward.h"
#include "tools/psrun/fault_options.h"
#include "tools/psrun/host_loss.h"
#include "tools/psrun/join.h"
#include "tools/psrun/launch_options.h"
#include "tools/psrun/observe.h"
#include "tools/psrun/options.h"
#include "tools/psrun/pacing.h"
#include "tools/psrun/preflight_hosts.h"
#include "tools/psrun/role_from_env.h"
#include "tools/psrun/ssh_options.h"
#include "transport/factory.h"

namespace {

using psrt::psrun::Args;

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw psrt::Error(psrt::ErrorCode::kSystem, "cannot resolve /proc/self/exe");
  return p.string();
}

// Where servers and workers run with --launcher ssh (printed); nullopt for a local job.
std::optional<psrt::launch::HostAssignment> placement_of(const Args& a) {
  using namespace psrt::launch;
  const bool ssh_flags = !a.ssh.hosts.empty() || !a.ssh.hostfile.empty() ||
                         !a.ssh.server_hosts.empty() || !a.ssh.ssh_args.empty() || a.ssh.dry_run;
  if (a.launcher == "mpi" || a.launcher == "slurm") {
    psrt::psrun::check_engine_flags(a.launcher, a.ssh, a.engine);
    return std::nullopt;
  }
  if (a.launcher != "ssh") {
    if (ssh_flags)
      throw psrt::Error(
          psrt::ErrorCode::kInvalidArgument,
          "-H, --hostfile, --server-hosts, --ssh-args and --dry-run need --launcher ssh "
          "(-H, --hostfile and --dry-run also work with --launcher mpi, --dry-run "
          "with --launcher slurm)");
    return std::nullopt;
  }
  std::vector<std::string> server_hosts;
  if (!a.ssh.server_hosts.empty())
    for (const auto& h : parse_host_list(a.ssh.server_hosts))
      server_hosts.push_back(h.host);
  return assign_hosts(hosts_from(a.ssh.hosts, a.ssh.hostfile), server_hosts, a.servers, a.workers);
}

// Where the scheduler listens: on the interface `spec` names (psrun --interface, PSRT_INTERFACE);
// else for an ssh job on the interface whose route reaches the job's hosts (the first host that
// is not this one's loopback), for a local job on loopback.
psrt::InterfaceAddress scheduler_interface(
    const std::string& spec, const std::optional<psrt::launch::HostAssignment>& placement) {
  if (!spec.empty()) return psrt::choose_address(spec, "");
  if (placement) {
    std::vector<std::string> hosts = placement->servers;
    hosts.insert(hosts.end(), placement->workers.begin(), placement->workers.end());
    for (const auto& host : hosts) {
      psrt::InterfaceAddress a = psrt::route_to(host);
      if (!psrt::is_loopback(a.address)) return a;
    }
  }
  return psrt::route_to("127.0.0.1");
}

using Env = std::vector<std::pair<std::string, std::string>>;

// Busy-polling progress threads steal the cores that training computes on when this host runs
// as many processes as it has cores: they sleep between events then (PSRT_SPIN_US=0), unless
// PSRT_SPIN_US says otherwise.
bool progress_threads_sleep(const Args& a) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return !std::getenv("PSRT_SPIN_US") && static_cast<unsigned>(a.workers + a.servers) >= cores;
}

Env common_env(const Args& a, const std::string& scheduler, const std::string& transport,
               const std::string& secret, bool secure, const std::string& interface) {
  Env common = {
      {"PSRT_SCHEDULER", scheduler},
      {"PSRT_TRANSPORT", transport},
      {"PSRT_SECRET", secret},
      {"PSRT_SECURE", secure ? "1" : "0"},
      {"PSRT_NUM_WORKERS", std::to_string(a.workers)},
      {"PSRT_NUM_SERVERS", std::to_string(a.servers)},
      {"PSRT_MODE", a.mode},
      {"PSRT_STALENESS", std::to_string(a.staleness)},
      {"PSRT_OPTIMIZER", a.optimizer},
      {"PSRT_BETAS", a.betas},
      {"PSRT_EPS", fmt::format("{}", a.eps)},
      {"PSRT_LR", fmt::format("{}", a.lr)},
      {"PSRT_MOMENTUM", fmt::format("{}", a.momentum)},
      {"PSRT_DAMPENING", fmt::format("{}", a.dampening)},
      {"PSRT_WEIGHT_DECAY", fmt::format("{}", a.weight_decay)},
      {"PSRT_NESTEROV", a.nesterov ? "1" : "0"},
      {"PSRT_MAX_GRAD_NORM", fmt::format("{}", a.max_grad_norm)},
      {"PSRT_SKIP_NONFINITE", a.skip_nonfinite ? "1" : "0"},
      {"PSRT_AGGREGATE", a.aggregate},
      {"PSRT_PARTITION_BYTES", std::to_string(a.partition_bytes)},
      {"PSRT_SHARDING", a.balanced_cut ? "balanced" : "fixed"},
      {"PSRT_CHECKPOINT_DIR", a.checkpoint_dir},
      {"PSRT_CHECKPOINT_EVERY", std::to_string(a.checkpoint_every)},
      {"PSRT_SERVER_THREADS", std::to_string(a.server_threads)},
      {"PSRT_SERVER_DEVICE", a.server_device},
      {"PSRT_ON_WORKER_LOSS", a.fault.on_worker_loss},
      {"PSRT_REPLICAS", std::to_string(a.replicas)},
      {"PSRT_BACKUP_WORKERS", std::to_string(a.elastic.backup_workers)},
  };
  if (!interface.empty()) common.emplace_back("PSRT_INTERFACE", interface);
  if (a.send_window > 0) common.emplace_back("PSRT_SEND_WINDOW", std::to_string(a.send_window));
  // --env, and PYTHONPATH/CUDA_*/NCCL_* by default: every launcher hands `common` to every
  // process. A name psrun sets (here, or per process) is refused.
  std::vector<std::string> reserved = {
      "PSRT_ROLE",       "PSRT_RANK",          "RANK",
      "WORLD_SIZE",      "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
      "PSRT_LOCAL_RANK", "PSRT_LOCAL_SIZE",    "PSRT_GPU",
      "PSRT_PLACE",      "PSRT_RESTART_COUNT", "PSRT_RESUME_ROUND"};
  for (const auto& kv : common)
    reserved.push_back(kv.first);
  for (auto& kv : psrt::psrun::forwarded_env(a.env, environ, reserved))
    common.push_back(std::move(kv));
  if (progress_threads_sleep(a)) common.emplace_back("PSRT_SPIN_US", "0");
  return common;
}

psrt::launch::JobSpec build_job(const Args& a, const Env& common,
                                const std::optional<psrt::launch::HostAssignment>& placement) {
  psrt::launch::JobSpec job;
  // --replicas 2: a slice's backup is the next server in rank order; losing a host that holds
  // both loses the slice (round-robin --server-hosts puts them apart unless the last server
  // wraps around onto server 0's host).
  if (a.replicas > 1 && placement)
    for (int i = 0; i < a.servers; ++i) {
      const auto& here = placement->servers[static_cast<std::size_t>(i)];
      const auto& next = placement->servers[static_cast<std::size_t>((i + 1) % a.servers)];
      if (!here.empty() && here == next)
        PSRT_LOG_WARN(
            "--replicas 2: server {} and its backup, server {}, both run on {}: losing that host "
            "loses both copies and stops the job (--server-hosts places servers round-robin: "
            "order or count the hosts so that neighbouring ranks differ)",
            i, (i + 1) % a.servers, here);
    }
  const std::string exe = self_exe();
  for (int i = 0; i < a.servers; ++i) {
    psrt::launch::ProcessSpec p;
    p.label = fmt::format("server {}", i);
    p.argv = {exe, "--internal-server"};
    p.env = common;
    p.env.emplace_back("PSRT_ROLE", "server");
    p.env.emplace_back("PSRT_RANK", std::to_string(i));
    p.may_fail = a.replicas > 1;  // its backup takes over
    if (placement) p.host = placement->servers[static_cast<std::size_t>(i)];
    job.services.push_back(std::move(p));
  }
  // torchrun's variables, counting workers per host (runtime/worker_ranks.h).
  const auto local = psrt::runtime::local_ranks(
      placement ? placement->workers
                : std::vector<std::string>(static_cast<std::size_t>(a.workers)));
  for (int i = 0; i < a.workers; ++i) {
    psrt::launch::ProcessSpec p;
    p.label = fmt::format("worker {}", i);
    p.argv = a.command;
    p.env = common;
    p.env.emplace_back("PSRT_ROLE", "worker");
    p.env.emplace_back("PSRT_RANK", std::to_string(i));
    for (auto& kv :
         psrt::runtime::worker_rank_env(i, a.workers, local[static_cast<std::size_t>(i)]))
      p.env.push_back(std::move(kv));
    if (placement) p.host = placement->workers[static_cast<std::size_t>(i)];
    job.workers.push_back(std::move(p));
  }
  return job;
}

// What --launcher's backend is made from (runtime/launch/factory.h).
psrt::launch::LaunchOptions launch_options_of(const Args& a) {
  return psrt::psrun::launch_options(a.launcher, a.ssh, a.engine, self_exe());
}

// What stays the same over the restarts of one psrun.
struct Attempt {
  const Args& a;
  const psrt::ps::SchedulerConfig& sc;
  const std::string& transport;
  const std::string& secret;
  const std::string& interface;
  const psrt::InterfaceAddress& where;
  const std::optional<psrt::launch::HostAssignment>& placement;
  const std::optional<psrt::psrun::Observation>& observation;  // live metrics, the report
};

// One run of the job: a fresh scheduler (which finds the checkpoint round to resume from), the
// servers and the workers; psrun's exit status for it.
int run_attempt(const Attempt& at, int restart) {
  using namespace psrt;
  const Args& a = at.a;
  const ps::SchedulerConfig& sc = at.sc;
  ps::Scheduler scheduler(sc);
  Env env = common_env(a, scheduler.address(), at.transport, at.secret, sc.secure, at.interface);
  if (at.observation) {
    scheduler.set_observers(at.observation->metrics, at.observation->timeline);
    if (at.observation->metrics) env.emplace_back("PSRT_METRICS", "1");
    if (at.observation->timeline) env.emplace_back("PSRT_TIMELINE", "1");
  }
  env.emplace_back("PSRT_RESTART_COUNT", std::to_string(restart));
  env.emplace_back("PSRT_RESUME_ROUND", std::to_string(scheduler.resume_round()));
  const psrun::JoinFile join_file(a.elastic.join_file, env);
  if (restart > 0)
    PSRT_LOG_INFO("restart {} of {}: resuming from checkpoint round {}", restart,
                  a.fault.max_restarts, scheduler.resume_round());
  launch::JobSpec job = build_job(a, env, at.placement);
  psrun::place_job(a, at.transport, job);
  // Once every worker has exited, the servers have nothing left to serve.
  job.on_workers_done = [&scheduler] { scheduler.stop(psrt::Status()); };
  for (auto& w : job.workers)  // --on-worker-loss continue: the rounds go on without it
    w.may_fail = sc.worker_loss == ps::SchedulerConfig::WorkerLoss::kContinue;
  // psrun stops the job (a process failed, a signal): every process hears why, unless the
  // scheduler had stopped it first (then its verdict names the first process lost).
  bool scheduler_first = false;
  job.on_stopping = [&](const std::string& why) {
    const Status before = scheduler.wait(std::chrono::milliseconds(0));
    scheduler_first = !before.ok() && before.code() != ErrorCode::kTimeout;
    scheduler.stop(Status(ErrorCode::kCancelled, "psrun stopped the job: " + why));
  };
  PSRT_LOG_INFO(
      "job: {} workers, {} servers, transport {}{}, mode {}, scheduler at {} "
      "(interface {})",
      a.workers, a.servers, at.transport, sc.secure ? " (secure)" : "", a.mode, scheduler.address(),
      at.where.name.empty() ? "?" : at.where.name);
  int rc = launch::make_launch_backend(a.launcher, launch_options_of(a))->run(job);
  Status how = scheduler.wait(std::chrono::milliseconds(0));
  if (rc == 0 && !how.ok() && how.code() != ErrorCode::kTimeout) {
    std::cerr << "psrun: the job ended with an error: " << how.message() << "\n";
    rc = 1;
  } else if (rc != 0 && scheduler_first) {
    // The scheduler's verdict names the process it lost first (and its host), which the first
    // process to exit may not be.
    std::cerr << "psrun: the scheduler's verdict: " << how.message() << "\n";
  }
  return rc;
}

int run(const Args& given) {
  using namespace psrt;
  ps::parse_mode(given.mode);            // validates
  auto placement = placement_of(given);  // moved off lost hosts before a restart
  const std::string secret = runtime::job_secret(runtime::NoSecret::kGenerate, given.secret_file);
  std::string transport = given.transport;
  if (transport.empty()) transport = transport::available_backends().front();
  Args paced = given;
  psrun::pace_across_hosts(paced, transport, placement, psrun::send_window_set(given.env));
  const Args& a = paced;
  const std::string interface =
      a.interface.empty() ? runtime::env_string("PSRT_INTERFACE") : a.interface;
  const InterfaceAddress where = scheduler_interface(
      interface, placement ? placement : psrun::engine_hosts(a.launcher, a.ssh));
  if (a.preflight)
    return psrun::run_preflight(a, transport, where, placement, launch_options_of(a), self_exe());
  psrun::check_bind(a);
  if (progress_threads_sleep(a))
    PSRT_LOG_INFO(
        "{} workers + {} servers on {} cores: progress threads sleep between events "
        "(PSRT_SPIN_US=0; set it to override)",
        a.workers, a.servers, std::max(1u, std::thread::hardware_concurrency()));
  const bool secure = a.secure || runtime::env_bool("PSRT_SECURE");
  if (placement)
    PSRT_LOG_INFO("placement over ssh (scheduler here, {}):\n{}", where.address,
                  launch::describe_assignment(*placement));
  if (a.ssh.dry_run && a.launcher == "ssh") {
    const std::string scheduler = a.port != 0 ? join_host_port(where.address, a.port)
                                              : join_host_port(where.address, 0) +
                                                    " (port 0: the real one is chosen at start)";
    auto job =
        build_job(a, common_env(a, scheduler, transport, secret, secure, interface), placement);
    std::cout << launch::describe_ssh_job(job, launch::ssh_options_of(launch_options_of(a)));
    return 0;
  }

  // The scheduler reads the variables its servers and workers get (their PSRT_SCHEDULER is not
  // known yet, and it does not read that one).
  Args job = a;  // --min-workers: a restart after hosts are lost may run fewer workers
  auto config_of = [&](const Args& j) {
    return runtime::scheduler_config(join_host_port(where.address, a.port), secret,
                                     common_env(j, "", transport, secret, secure, interface));
  };
  ps::SchedulerConfig sc = config_of(job);
  log::set_prefix("scheduler");
  psrun::ObserveFlags observe = a.observe;
  psrun::finish_observe_flags(observe);
  const auto observation = psrun::start_observation(observe, where.address);
  Attempt attempt{job, sc, transport, secret, interface, where, placement, observation};
  psrun::install_checkpoint_signal(a.checkpoint_dir);
  for (int restart = 0;; ++restart) {
    const auto started = std::chrono::steady_clock::now();
    const int rc = run_attempt(attempt, restart);
    if (observation) psrun::finish_observation(observe, *observation);
    // A job that ended, or that psrun was told to stop (128 + the signal), is not restarted.
    if (rc == 0 || rc >= 128 || restart >= a.fault.max_restarts) return rc;
    const double ran =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::cerr << fmt::format(
        "psrun: the job failed after {:.1f} s; restarting it (restart {} of {}){}\n", ran,
        restart + 1, a.fault.max_restarts,
        a.checkpoint_dir.empty() ? " from the start (no --checkpoint-dir)"
                                 : " from the latest complete checkpoint in " + a.checkpoint_dir);
    if (placement && !psrun::move_off_lost_hosts(psrun::split_ssh_args(a.ssh.ssh_args),
                                                 a.fault.min_workers, *placement))
      return rc;
    if (placement && std::cmp_not_equal(placement->workers.size(), job.workers)) {
      job.workers = static_cast<int>(placement->workers.size());
      sc = config_of(job);  // the scheduler waits for the workers there are
    }
  }
}

}  // namespace

// What throws out of main (std::bad_alloc, a CLI11 or filesystem error outside the try blocks)
// ends psrun with std::terminate's message, which is what a user should see then.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  if (argc >= 2 && std::strcmp(argv[1], "--internal-remote") == 0)
    return psrt::launch::run_remote_side(argc - 2, argv + 2);
  if (argc >= 2 && std::strcmp(argv[1], "--role-from-env") == 0) {
    int first = (argc >= 3 && std::strcmp(argv[2], "--") == 0) ? 3 : 2;
    try {
      return psrt::psrun::run_role_from_env({argv + first, argv + argc}, self_exe());
    } catch (const psrt::Error& e) {
      std::cerr << "psrt: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc >= 2 && std::strcmp(argv[1], "--internal-server") == 0) {
    try {
      return psrt::runtime::run_server_from_env();
    } catch (const psrt::Error& e) {
      std::cerr << "psrt server: " << e.what() << "\n";
      return 1;
    }
  }
  CLI::App app{"psrun: launch a psrt parameter-server job (scheduler, S servers, N workers)"};
  psrt::psrun::Args a;
  bool help_env = false;
  psrt::psrun::add_options(app, a, help_env);
  CLI11_PARSE(app, argc, argv);
  if (help_env) {
    psrt::runtime::print_env_help(std::cout);
    return 0;
  }
  if (!a.elastic.join.empty()) return psrt::psrun::exec_joiner(a.elastic.join, a.command);
  if (auto rc = psrt::psrun::finish_options(app, a, self_exe())) return *rc;
  try {
    psrt::psrun::finish_fault_flags(a.fault, a.launcher);
    psrt::psrun::finish_elastic_flags(a.elastic, a.mode, a.workers, a.replicas);
    psrt::psrun::check_min_workers(a.fault, a.launcher, a.workers, a.elastic.backup_workers);
    return run(a);
  } catch (const psrt::Error& e) {
    std::cerr << "psrun: " << e.what() << "\n";
    return 1;
  }
}
