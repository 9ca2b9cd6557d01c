#include "tools/psrun/bind.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "base/log.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
#include "runtime/placement/env_place.h"
#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"

namespace psrt::psrun {
namespace {

// --bind, else PSRT_BIND, else "" (auto).
std::string bind_text(const Args& a) {
  return a.bind.empty() ? runtime::env_string("PSRT_BIND") : a.bind;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? name : "?";
}

}  // namespace

void check_bind(const Args& a) {
  const std::string text = bind_text(a);
  if (!text.empty() && !placement::parse_bind(text))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PSRT_BIND={}: use none, numa or core", text));
  if ((a.launcher == "mpi" || a.launcher == "slurm") && !a.bind.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--bind places the processes psrun starts (--launcher local or ssh); "
                            "with --launcher {} the engine binds them (mpirun --bind-to, srun "
                            "--cpu-bind), or leave --bind out",
                            a.launcher));
}

namespace {

// An ssh job: every process gets PSRT_PLACE (its role, index on its host, the job's workers and
// servers there); the remote side plans with that host's topology and binds it.
void place_ssh_job(const Args& a, launch::JobSpec& job) {
  std::map<std::string, std::pair<int, int>> on_host;  // host -> (workers, servers)
  for (const auto& p : job.workers)
    ++on_host[p.host].first;
  for (const auto& p : job.services)
    ++on_host[p.host].second;
  std::map<std::string, std::pair<int, int>> seen;
  for (auto* list : {&job.services, &job.workers}) {
    const bool servers = list == &job.services;
    for (auto& p : *list) {
      auto& [w, s] = seen[p.host];
      const auto [workers, nservers] = on_host[p.host];
      p.env.emplace_back("PSRT_PLACE",
                         placement::place_spec(servers ? "server" : "worker", servers ? s++ : w++,
                                               workers, nservers));
      if (!a.bind.empty()) p.env.emplace_back("PSRT_BIND", a.bind);
    }
  }
}

}  // namespace

void place_job(const Args& a, const std::string& transport, launch::JobSpec& job) {
  if (a.launcher == "ssh") {
    place_ssh_job(a, job);
    return;
  }
  if (a.launcher != "local") return;
  const std::string text = bind_text(a);
  placement::Request req;
  req.workers = a.workers;
  req.servers = a.servers;
  req.bind = text.empty() ? placement::Bind::kAuto : *placement::parse_bind(text);
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) req.cuda_visible_devices = cvd;
  placement::Topology topo;
  try {
    topo = placement::read_topology();
  } catch (const Error& e) {
    PSRT_LOG_WARN("placement: {}; processes run unbound", e.what());
    return;
  }
  const placement::Plan plan = placement::place(topo, req);
  std::string table = placement::format_plan(host_name(), plan);
  table.pop_back();  // the log adds the line end
  PSRT_LOG_INFO("{}", table);
  std::optional<std::string> tls;
  if (const char* t = std::getenv("UCX_TLS")) tls = t;
  const bool user_nic = std::getenv("UCX_NET_DEVICES") != nullptr;
  for (const auto& p : plan.places) {
    auto& specs = p.role == "server" ? job.services : job.workers;
    if (static_cast<std::size_t>(p.rank) >= specs.size()) continue;
    launch::ProcessSpec& spec = specs[static_cast<std::size_t>(p.rank)];
    spec.cpus = p.cpus;
    for (auto& kv : placement::process_env(p, transport, tls, user_nic))
      spec.env.push_back(std::move(kv));
  }
}

}  // namespace psrt::psrun
