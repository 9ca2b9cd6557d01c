#include "tools/psrun/role_from_env.h"

#include <fmt/core.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "base/interfaces.h"
#include "base/log.h"
#include "psrt/error.h"
#include "runtime/engine_env.h"
#include "runtime/env_contract.h"
#include "runtime/job_secret.h"
#include "runtime/launch/factory.h"
#include "runtime/listen_address.h"
#include "runtime/placement/env_place.h"
#include "runtime/scheduler_process.h"
#include "runtime/worker_ranks.h"
#include "tools/psrun/observe.h"

namespace psrt::psrun {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The scheduler global rank 0 hosts: listens on every address at the engine's port.
std::unique_ptr<ps::Scheduler> host_scheduler(const std::string& address) {
  const auto colon = address.rfind(':');
  const std::string listen = "0.0.0.0:" + address.substr(colon + 1);
  auto sc = runtime::scheduler_config(listen, runtime::job_secret(runtime::NoSecret::kRefuse));
  log::set_prefix("scheduler");
  auto scheduler = std::make_unique<ps::Scheduler>(sc);
  PSRT_LOG_INFO("scheduler for {} servers and {} workers listening on {}, reached as {}",
                sc.num_servers, sc.num_workers, scheduler->address(), address);
  return scheduler;
}

// After this rank's own process: the scheduler serves the others until the job ends (the last
// worker leaves, or a peer is lost: bounded by PSRT_PEER_TIMEOUT_MS). SIGINT/SIGTERM end it.
int serve_until_job_ends(ps::Scheduler& scheduler, int own_rc) {
  if (own_rc != 0)
    scheduler.stop(Status(ErrorCode::kCancelled,
                          fmt::format("the process of global rank 0 on {} failed", host_name())));
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  for (;;) {
    Status how = scheduler.wait(std::chrono::milliseconds(200));
    if (how.code() != ErrorCode::kTimeout) {
      if (!how.ok() && own_rc == 0) {
        std::cerr << "psrt: the job ended with an error: " << how.message() << "\n";
        return 1;
      }
      return own_rc;
    }
    timespec zero{0, 0};
    if (int sig = sigtimedwait(&stop, nullptr, &zero); sig > 0) {
      scheduler.stop(Status(ErrorCode::kCancelled, fmt::format("stopped by signal {}", sig)));
      return 128 + sig;
    }
  }
}

// Engine-started processes start in any order: wait (bounded by PSRT_CONNECT_TIMEOUT_MS) until
// the scheduler that global rank 0 hosts accepts connections, so that no process fails for
// having started first.
void wait_for_scheduler(const std::string& address) {
  const auto timeout = runtime::env_ms("PSRT_CONNECT_TIMEOUT_MS");
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      why = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const bool ok = fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        why = ok ? "" : std::strerror(errno);
        if (fd >= 0) ::close(fd);
        if (ok) break;
      }
      ::freeaddrinfo(found);
      if (why.empty()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(ErrorCode::kTimeout,
              fmt::format("the scheduler at {} (hosted by global rank 0) did not accept a "
                          "connection within {} ms (PSRT_CONNECT_TIMEOUT_MS): {}; is rank 0 "
                          "running, and does that address reach it?",
                          address, timeout.count(), why));
}

// A worker under an engine: its GPU among this host's, counting workers only, chosen by the
// same placement as psrun's local and ssh jobs (runtime/placement/) from this host's topology;
// nullopt on a host without GPUs, or when PSRT_GPU is set already. The engine binds CPUs.
std::optional<std::string> engine_worker_gpu(const runtime::EngineJob& job) {
  if (std::getenv("PSRT_GPU")) return std::nullopt;
  const runtime::LocalRank local =
      runtime::worker_local_rank(job.global_rank, job.num_servers, job.local_rank, job.local_size);
  const int servers_here = std::max(0, job.local_size - local.size);
  try {
    const auto place = placement::place_from_env(
        {"PSRT_PLACE=" + placement::place_spec("worker", local.rank, local.size, servers_here),
         "PSRT_BIND=none"});
    for (const auto& kv : place ? place->env : std::vector<std::string>{})
      if (kv.rfind("PSRT_GPU=", 0) == 0) return kv.substr(9);
  } catch (const Error& e) {
    PSRT_LOG_WARN("placement: {}; PSRT_GPU is not set", e.what());
  }
  return std::nullopt;
}

}  // namespace

int run_role_from_env(const std::vector<std::string>& command, const std::string& self_exe) {
  const bool scheduler_given = std::getenv("PSRT_SCHEDULER") != nullptr;  // e.g. psrun's
  std::optional<runtime::EngineJob> job = runtime::adopt_engine_env();
  if (!job && !std::getenv("PSRT_ROLE"))
    throw Error(ErrorCode::kInvalidArgument,
                "--role-from-env: neither PSRT_ROLE nor an engine's variables are set "
                "(OMPI_COMM_WORLD_RANK, RANK + WORLD_SIZE, TF_CONFIG, SLURM_PROCID): start this "
                "under mpirun, srun or a Kubernetes job (docs/environment.md)");
  const std::string role = runtime::env_string("PSRT_ROLE");
  const auto rank = runtime::env_int("PSRT_RANK", 0, 1 << 20);
  if (role != "server" && role != "worker")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--role-from-env: PSRT_ROLE='{}' is not server or worker", role));
  if (role == "worker" && command.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "--role-from-env: this process is a worker but no COMMAND was given: psrun "
                "--role-from-env -- COMMAND [ARGS...]");
  if (job && role == "server" && job->local_size < job->world_size &&
      runtime::env_string("PSRT_HOST").empty() && runtime::env_string("PSRT_INTERFACE").empty()) {
    // A server on the scheduler's host would follow the route to it, which can be loopback
    // (a host name that /etc/hosts maps to 127.0.1.1): other hosts could never reach it.
    const std::string host = runtime::listen_host_from_env(job->scheduler);
    if (is_loopback(host))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("this server would listen on {} (the route to the scheduler at {}), "
                              "which the job's other hosts cannot reach: set PSRT_INTERFACE "
                              "(e.g. eth0 or 10.0.0.0/24) or PSRT_HOST",
                              host, job->scheduler));
  }
  runtime::job_secret(
      runtime::NoSecret::kRefuse);  // fails here, naming the variables, rather than in a child
  if (job && role == "worker")
    if (const auto gpu = engine_worker_gpu(*job)) ::setenv("PSRT_GPU", gpu->c_str(), 1);
  if (job)
    PSRT_LOG_INFO("{}: global rank {} of {} is {} {} (local {}/{}), scheduler {}", job->engine,
                  job->global_rank, job->world_size, role, rank, job->local_rank, job->local_size,
                  job->scheduler);
  std::unique_ptr<ps::Scheduler> scheduler;
  if (job && job->hosts_scheduler)
    scheduler = host_scheduler(job->scheduler);
  else if (job && !scheduler_given)
    wait_for_scheduler(job->scheduler);
  // PSRT_METRICS_PORT: this rank serves the job's live metrics (before its own process starts).
  const auto observation = scheduler ? observe_hosted_scheduler(*scheduler) : std::nullopt;

  launch::JobSpec spec;
  launch::ProcessSpec p;
  p.label = fmt::format("{} {}@{}", role, rank, host_name());
  p.argv = role == "server" ? std::vector<std::string>{self_exe, "--internal-server"} : command;
  spec.workers.push_back(std::move(p));
  const int rc = launch::make_launch_backend("local")->run(spec);
  return scheduler ? serve_until_job_ends(*scheduler, rc) : rc;
}

}  // namespace psrt::psrun
