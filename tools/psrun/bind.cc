#include "tools/psrun/bind.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>

#include "base/log.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
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
  if (a.launcher != "local" && !a.bind.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--bind places the processes of a local job (--launcher local); with "
                            "--launcher {} the engine binds them (mpirun --bind-to, srun "
                            "--cpu-bind), or leave --bind out",
                            a.launcher));
}

void place_local_job(const Args& a, const std::string& transport, runtime::JobSpec& job) {
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
    runtime::ProcessSpec& spec = specs[static_cast<std::size_t>(p.rank)];
    spec.cpus = p.cpus;
    for (auto& kv : placement::process_env(p, transport, tls, user_nic))
      spec.env.push_back(std::move(kv));
  }
}

}  // namespace psrt::psrun
