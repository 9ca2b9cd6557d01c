#include "runtime/preflight/verdict.h"

#include <fmt/core.h>

#include <algorithm>
#include <sstream>

#include "runtime/preflight/ib_rate.h"
#include "runtime/preflight/report.h"

namespace psrt::preflight {
namespace {

constexpr std::uint64_t kMinRdmaMemlock = std::uint64_t{64} << 20;

std::vector<std::string> tls_list(const std::string& tls) {
  std::vector<std::string> out;
  if (tls.empty() || tls.front() == '^') return out;
  std::stringstream in(tls);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool is_rdma_tl(const std::string& tl) {
  if (tl == "rc" || tl == "dc" || tl == "ud" || tl == "ib") return true;
  return tl.starts_with("rc_") || tl.starts_with("dc_") || tl.starts_with("ud_");
}

bool is_cuda_tl(const std::string& tl) {
  return tl == "cuda" || tl.starts_with("cuda_") || tl == "gdr_copy";
}

std::string tls_text(const std::string& tls) {
  return "UCX_TLS=" + tls;
}

Check pass(std::string what) {
  return {Level::kPass, std::move(what), ""};
}
Check fail(std::string what, std::string fix) {
  return {Level::kFail, std::move(what), std::move(fix)};
}

// UCX_NET_DEVICES, when set, must name an ACTIVE RDMA port of this host ("mlx5_0:1" or
// "mlx5_0"; other names, e.g. eth0 for tcp, are UCX's business). False when it does not.
bool judge_net_devices(const HostFacts& f, const Requirements& job, std::vector<Check>& out) {
  const std::string& nd = job.ucx_net_devices;
  if (nd.empty() || nd == "all") return true;
  std::string named_down;
  std::stringstream in(nd);
  for (std::string item; std::getline(in, item, ',');) {
    for (const auto& p : f.ib.ports) {
      if (item != fmt::format("{}:{}", p.device, p.port) && item != p.device) continue;
      if (p.active()) return true;
      named_down +=
          fmt::format("{}{}:{} {}", named_down.empty() ? "" : ", ", p.device, p.port, p.state);
    }
  }
  std::string ports;
  for (const auto& p : f.ib.ports)
    ports += fmt::format("{}{}:{} {}", ports.empty() ? "" : ", ", p.device, p.port, p.state);
  out.push_back(
      fail(named_down.empty()
               ? fmt::format("UCX_NET_DEVICES={} names no RDMA port of this host (it "
                             "has {})",
                             nd, ports)
               : fmt::format("UCX_NET_DEVICES={} names no ACTIVE RDMA port ({})", nd, named_down),
           "set UCX_NET_DEVICES to an ACTIVE port of the list (ibstat), or leave it "
           "unset"));
  return false;
}

void judge_rdma(const HostFacts& f, const Requirements& job, std::vector<Check>& out) {
  const std::string tls = tls_text(job.ucx_tls);
  if (f.ib.ports.empty()) {
    const std::string seen =
        f.ib.error.empty()
            ? (f.ib.devices == 0 ? std::string("ibv_get_device_list found no device")
                                 : fmt::format("{} device(s) without ports", f.ib.devices))
            : f.ib.error;
    out.push_back(fail(fmt::format("{} needs an RDMA device (InfiniBand or RoCE) and this host "
                                   "has none ({})",
                                   tls, seen),
                       "run on a host with an InfiniBand or RoCE NIC (ibv_devinfo lists it), or "
                       "set UCX_TLS=tcp, or use --transport tcp"));
    return;
  }
  std::string active, down;
  for (const auto& p : f.ib.ports) {
    const std::string name = fmt::format("{}:{}", p.device, p.port);
    if (p.active())
      active += fmt::format("{}{} {}", active.empty() ? "" : ", ", name,
                            describe_ib_rate(p.width_code, p.speed_code));
    else
      down += fmt::format("{}{} {}", down.empty() ? "" : ", ", name, p.state);
  }
  if (active.empty()) {
    out.push_back(fail(fmt::format("{} needs an ACTIVE RDMA port and none is ({})", tls, down),
                       "check the port with ibstat (cable, subnet manager), or set "
                       "UCX_NET_DEVICES to an active port, or UCX_TLS=tcp"));
    return;
  }
  if (!judge_net_devices(f, job, out)) return;
  out.push_back(pass(fmt::format("{}: RDMA port {}", tls, active)));
  if (f.memlock.soft && *f.memlock.soft < kMinRdmaMemlock) {
    out.push_back(fail(fmt::format("the locked-memory limit is {}: RDMA registers the job's "
                                   "buffers and needs it high (at least {})",
                                   format_bytes(*f.memlock.soft), format_bytes(kMinRdmaMemlock)),
                       "ulimit -l unlimited (memlock in /etc/security/limits.conf; under Slurm "
                       "also PropagateResourceLimits)"));
  } else if (f.memlock.soft) {
    out.push_back({Level::kWarn,
                   fmt::format("the locked-memory limit is {}: large models may not register",
                               format_bytes(*f.memlock.soft)),
                   "ulimit -l unlimited"});
  }
}

void judge_ucx(const HostFacts& f, const Requirements& job, std::vector<Check>& out) {
  if (!f.ucx.built) {
    out.push_back(fail("transport ucx: this psrun was built without UCX",
                       "install libucx-dev and rebuild psrt, or use --transport tcp"));
    return;
  }
  const std::size_t before = out.size();
  if (tls_needs_rdma(job.ucx_tls)) judge_rdma(f, job, out);
  if (tls_needs_cuda(job.ucx_tls)) {
    if (f.cuda.devices.empty())
      out.push_back(fail(fmt::format("{} needs a CUDA device and this host has none ({})",
                                     tls_text(job.ucx_tls), f.cuda.why),
                         "run on a GPU host, or leave the cuda transports out of UCX_TLS"));
    else if (!f.ucx.cuda_memory)
      out.push_back(fail(fmt::format("{} needs UCX with CUDA support, and UCX {} here cannot "
                                     "move CUDA memory",
                                     tls_text(job.ucx_tls), f.ucx.version),
                         "install a UCX built with CUDA (ucx_info -d lists cuda_copy)"));
  }
  const bool failed = std::any_of(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(),
                                  [](const Check& c) { return c.level == Level::kFail; });
  if (!f.ucx.error.empty()) {
    if (!failed)
      out.push_back(fail(
          fmt::format("transport ucx: UCX {} does not start here: {}", f.ucx.version, f.ucx.error),
          "ucx_info -d lists what UCX finds; check UCX_TLS and UCX_NET_DEVICES"));
    return;
  }
  if (!failed) {
    std::string tls;
    for (const auto& t : f.ucx.transports)
      tls += (tls.empty() ? "" : ", ") + t;
    out.push_back(pass(fmt::format("transport ucx: UCX {} starts ({})", f.ucx.version,
                                   tls.empty() ? "transports not listed" : tls)));
  }
}

}  // namespace

bool tls_needs_rdma(const std::string& ucx_tls) {
  for (const auto& tl : tls_list(ucx_tls))
    if (is_rdma_tl(tl)) return true;
  return false;
}

bool tls_needs_cuda(const std::string& ucx_tls) {
  for (const auto& tl : tls_list(ucx_tls))
    if (is_cuda_tl(tl)) return true;
  return false;
}

std::vector<Check> judge(const HostFacts& f, const Requirements& job) {
  std::vector<Check> out;
  if (job.transport == "ucx")
    judge_ucx(f, job, out);
  else
    out.push_back(pass(fmt::format("transport {}: needs no RDMA device", job.transport)));
  if (job.cuda_device) {
    const int n = static_cast<int>(f.cuda.devices.size());
    if (*job.cuda_device >= n)
      out.push_back(
          fail(fmt::format("the job computes on cuda:{} and {}", *job.cuda_device,
                           n == 0 ? "this host has no CUDA device (" + f.cuda.why + ")"
                                  : fmt::format("this host has {} (cuda:0..cuda:{})", n, n - 1)),
               "run on a GPU host, or use --server-device cpu"));
    else
      out.push_back(pass(fmt::format("cuda:{}: {}", *job.cuda_device,
                                     f.cuda.devices[static_cast<std::size_t>(*job.cuda_device)])));
  }
  if (f.scheduler.checked) {
    if (f.scheduler.error.empty())
      out.push_back(pass(fmt::format("the scheduler's port {} is reachable", f.scheduler.address)));
    else
      out.push_back(fail(fmt::format("the scheduler's port {} is not reachable: {}",
                                     f.scheduler.address, f.scheduler.error),
                         "pick another --port or --interface, or open the port in the firewall"));
  }
  return out;
}

bool passes(const std::vector<Check>& checks) {
  for (const auto& c : checks)
    if (c.level == Level::kFail) return false;
  return true;
}

}  // namespace psrt::preflight
