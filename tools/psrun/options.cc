#include "tools/psrun/options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "device/cuda_device.h"
#include "kernels/fused_adam.h"
#include "psrt/error.h"
#include "psrt/version.h"
#include "tools/psrun/env_forward.h"
#include "transport/factory.h"

namespace psrt::psrun {
namespace {

// The servers' optimizer until a worker calls set_optimizer, and how a round aggregates.
void add_sgd_options(CLI::App& app, Args& a) {
  app.add_option("--optimizer", a.optimizer,
                 "the servers' optimizer: sgd | adam | adamw (torch.optim's; Adam/AdamW keep 3x "
                 "the weights on the servers, docs/optimizers.md)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--betas", a.betas, "Adam/AdamW betas as B1,B2 (each in [0, 1))")
      ->capture_default_str();
  app.add_option("--eps", a.eps, "Adam/AdamW eps (> 0)")->capture_default_str();
  app.add_option("--lr", a.lr, "learning rate")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--momentum", a.momentum, "SGD momentum")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--dampening", a.dampening, "SGD dampening")
      ->check(CLI::Range(0.f, 1.f))
      ->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay,
                 "weight decay: L2 for sgd and adam, decoupled for adamw")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--nesterov", a.nesterov, "Nesterov momentum (needs --momentum > 0)");
  app.add_option("--max-grad-norm", a.max_grad_norm,
                 "clip each server update's mean gradient to this L2 norm, torch's "
                 "clip_grad_norm_ per slice (<= --partition-bytes), not over the whole model; "
                 "0 = off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--skip-nonfinite", a.skip_nonfinite,
               "skip a server update whose gradient holds a NaN or Inf (weights and momentum "
               "unchanged, a warning names key, slice and round)");
  app.add_option("--aggregate", a.aggregate, "mean | sum of a round's gradients")
      ->check(CLI::IsMember({"mean", "sum"}))
      ->capture_default_str();
}

// Why --optimizer, --betas, --eps and the SGD flags do not go together; empty when they do.
std::string check_optimizer(const Args& a) {
  OptimizerConfig c;
  if (!kernels::parse_betas(a.betas, c))
    return "--betas '" + a.betas + "' is not B1,B2 (two numbers, e.g. 0.9,0.999)";
  if (a.optimizer == "sgd") return {};
  if (!(c.beta1 >= 0.f && c.beta1 < 1.f && c.beta2 >= 0.f && c.beta2 < 1.f))
    return "--betas " + a.betas + ": each beta must be in [0, 1)";
  if (!(a.eps > 0.f && std::isfinite(a.eps))) return "--eps must be a finite number > 0";
  if (a.momentum != 0.f || a.dampening != 0.f || a.nesterov)
    return "--optimizer " + a.optimizer +
           " takes no --momentum, --dampening or --nesterov (SGD's; Adam's momentum is --betas)";
  return {};
}

// Where processes run on a host (--bind) and the check of a host before a job (--preflight).
void add_host_options(CLI::App& app, Args& a) {
  app.add_option(
         "--bind", a.bind,
         "bind each process of a local or ssh job to cores on one NUMA node (hwloc): none | "
         "numa (every core of its node) | core (cores of its own); default PSRT_BIND, "
         "else core when the host has a core per process, else numa. Workers go near "
         "their GPU, servers to the other end; the table is printed at start")
      ->check(CLI::IsMember({"none", "numa", "core"}));
  app.add_flag("--preflight", a.preflight,
               "check this host for the job the other flags describe (UCX and its transports, "
               "RDMA ports and their rate, locked-memory limit, CUDA devices, the scheduler's "
               "port), print one table and exit 1 naming what would fail; runs no job");
  app.add_option("--preflight-host", a.preflight_host)->group("");  // internal (ssh preflight)
  app.add_option("--preflight-reach", a.preflight_reach)->group("");
}

// Where the scheduler listens and how the job's connections are secured.
void add_network_options(CLI::App& app, Args& a) {
  app.add_option("--interface", a.interface,
                 "NAME (eth0) or CIDR (10.0.0.0/24): the interface whose address the scheduler "
                 "and the servers listen on and advertise (default PSRT_INTERFACE; else loopback "
                 "for a local job, the route to the first remote host for --launcher ssh)");
  app.add_option("--port", a.port, "scheduler port (0 = any free)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--secret-file", a.secret_file,
                 "job secret (first line; the file must be private, chmod 600); default "
                 "PSRT_SECRET, else the file PSRT_SECRET_FILE names, else a fresh random one");
  app.add_flag("--secure", a.secure,
               "seal every message of the job (AES-256-GCM, keys per connection from the job "
               "secret): for networks that are not trusted; costs bandwidth (perf/RESULTS.md)");
}

// The servers: replicas, update threads, device.
void add_server_options(CLI::App& app, Args& a) {
  app.add_option(
         "--replicas", a.replicas,
         "1, or 2: every slice also on a backup server that takes over, without losing "
         "an update, when its server is lost (cpu servers, --launcher local or ssh; needs -s 2 "
         "or more)")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  app.add_option("--server-threads", a.server_threads, "update threads per server")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--server-device", a.server_device,
                 "where servers keep slices and run updates: cpu, cuda (= cuda:0) or cuda:N")
      ->check([](const std::string& v) {
        try {
          psrt::device::parse_device(v);
          return std::string();
        } catch (const psrt::Error& e) {
          return std::string(e.what());
        }
      })
      ->capture_default_str();
}

}  // namespace

void add_options(CLI::App& app, Args& a, bool& help_env) {
  std::string backends;
  for (const auto& b : psrt::transport::available_backends())
    backends += " " + b;
  app.add_option("--transport", a.transport,
                 "ucx | tcp (default: the first built of:" + backends + ")")
      ->check(CLI::IsMember(psrt::transport::available_backends()));
  app.add_option("-n,--workers", a.workers, "workers (copies of COMMAND)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("-s,--servers", a.servers, "servers")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--mode", a.mode, "consistency: sync | async | ssp")
      ->check(CLI::IsMember({"sync", "async", "ssp"}))
      ->capture_default_str();
  app.add_option("--staleness", a.staleness, "ssp: rounds a worker may run ahead of the slowest")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  add_sgd_options(app, a);
  app.add_option("--partition-bytes", a.partition_bytes,
                 "max bytes of one slice of a tensor (giving it makes --sharding fixed unless "
                 "--sharding is given; not given, an ssh job across hosts over tcp or "
                 "UCX_TLS=tcp gets 131072 and PSRT_SEND_WINDOW=131072)")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 31))
      ->capture_default_str();
  app.add_option("--sharding", a.sharding,
                 "balanced (default without --partition-bytes): every tensor above 64 KiB is cut "
                 "evenly over all servers, smaller ones placed whole by bytes | fixed (default "
                 "with --partition-bytes): slices of --partition-bytes placed by bytes")
      ->check(CLI::IsMember({"balanced", "fixed"}));
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "servers checkpoint here; a job restarted "
                 "with the same dir resumes");
  app.add_option("--checkpoint-every", a.checkpoint_every, "checkpoint every R rounds (0 = never)")
      ->capture_default_str();
  add_network_options(app, a);
  app.add_option("--launcher", a.launcher,
                 "launch backend: local (every process on this host) | ssh (servers and workers "
                 "on the hosts of -H / --hostfile through ssh; the scheduler stays here) | mpi "
                 "(OpenMPI's mpirun starts them; -H / --hostfile passed to it) | slurm (srun, "
                 "inside an allocation)")
      ->check(CLI::IsMember({"local", "ssh", "mpi", "slurm"}))
      ->capture_default_str();
  add_ssh_options(app, a.ssh);
  add_engine_flags(app, a.engine);
  add_fault_flags(app, a.fault);
  add_env_option(app, a.env);
  add_elastic_flags(app, a.elastic);
  add_server_options(app, a);
  add_host_options(app, a);
  add_observe_flags(app, a.observe);
  app.add_flag("--help-env", help_env, "print the PSRT_* environment contract and exit");
  app.set_version_flag("--version", PSRT_VERSION, "print psrt's version and exit");
  // Taken by main() before the other flags are parsed; listed here so that --help shows it.
  app.add_flag("--role-from-env")
      ->description(
          "as psrun's first argument only, psrun --role-from-env [--] COMMAND [ARGS...]: run as "
          "the server or worker this process is by PSRT_ROLE or by the variables of the engine "
          "that started it (mpirun, srun, torchrun, TF_CONFIG), global rank 0 also hosting the "
          "scheduler (docs/environment.md)");
  app.add_option("command", a.command,
                 "COMMAND [ARGS...] run by every worker (none: the default job, 2 workers of "
                 "pstrain --model lenet --dataset fashion-mnist --epochs 1)")
      ->expected(-1);
  app.prefix_command(false);
  app.positionals_at_end(true);
}

std::optional<int> finish_options(const CLI::App& app, Args& a, const std::string& self_exe) {
  a.partition_given = app.count("--partition-bytes") > 0;
  a.balanced_cut = a.sharding.empty() ? !a.partition_given : a.sharding == "balanced";
  if (app.count("--role-from-env") > 0) {
    std::cerr << "psrun: --role-from-env must be psrun's first argument: psrun --role-from-env "
                 "[--] COMMAND [ARGS...] (it takes no other flag)\n";
    return 2;
  }
  if (a.command.empty() && !a.preflight) {
    // The default job: LeNet on Fashion-MNIST for one epoch with two workers.
    const auto pstrain = std::filesystem::path(self_exe).parent_path() / "pstrain";
    if (!std::filesystem::exists(pstrain)) {
      std::cerr << "psrun: no COMMAND given, and the default job's " << pstrain.string()
                << " is not there (this build has no LibTorch: install libtorch-dev and "
                   "rebuild): psrun [options] -- COMMAND [ARGS...] (see --help)\n";
      return 2;
    }
    a.command = {pstrain.string(), "--model",  "lenet", "--dataset",
                 "fashion-mnist",  "--epochs", "1"};
    if (app.count("--workers") == 0) a.workers = 2;
    std::cerr << "psrun: no COMMAND given: running the default job, " << a.workers
              << " workers of: " << pstrain.string() << " --model lenet --dataset fashion-mnist "
              << "--epochs 1\n";
  }
  if (a.replicas > 1 && a.servers < 2) {
    std::cerr << "psrun: --replicas 2 needs at least 2 servers (-s 2): a slice's backup is on "
                 "another server\n";
    return 2;
  }
  if (a.replicas > 1 && a.launcher != "local" && a.launcher != "ssh") {
    std::cerr << "psrun: --replicas 2 runs with --launcher local or ssh: with --launcher " +
                     a.launcher + " a lost server ends the whole job\n";
    return 2;
  }
  if (a.nesterov && (a.momentum <= 0.f || a.dampening != 0.f)) {
    std::cerr << "psrun: --nesterov needs --momentum > 0 and --dampening 0\n";
    return 2;
  }
  if (auto why = check_optimizer(a); !why.empty()) {
    std::cerr << "psrun: " << why << "\n";
    return 2;
  }
  if (!std::isfinite(a.max_grad_norm)) {  // NonNegativeNumber lets "inf" and "nan" through
    std::cerr << "psrun: --max-grad-norm must be a finite number >= 0 (0 = no clipping)\n";
    return 2;
  }
  if (a.checkpoint_every > 0 && a.checkpoint_dir.empty()) {
    std::cerr << "psrun: --checkpoint-every needs --checkpoint-dir\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace psrt::psrun
