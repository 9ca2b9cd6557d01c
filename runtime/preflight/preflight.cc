#include "runtime/preflight/preflight.h"

#include <fmt/core.h>

#include "base/interfaces.h"
#include "runtime/preflight/host_probe.h"
#include "runtime/preflight/ib_probe.h"
#include "runtime/preflight/report.h"
#include "runtime/preflight/ucx_probe.h"
#include "runtime/preflight/verdict.h"

namespace psrt::preflight {
namespace {

constexpr std::chrono::milliseconds kReachTimeout{2000};

// Listens on address:port (port 0 = any) and connects to it within kReachTimeout.
ReachFacts check_scheduler_port(const std::string& address, int port) {
  ReachFacts r;
  r.checked = true;
  r.address = join_host_port(address, port);
  const Listener listener(address, port);
  if (!listener.error().empty()) {
    r.error = listener.error();
    return r;
  }
  if (port == 0) r.address = join_host_port(address, listener.port()) + " (port 0: any free one)";
  r.error = tcp_reach(address, listener.port(), kReachTimeout);
  return r;
}

}  // namespace

HostFacts probe_host(const PreflightOptions& o) {
  HostFacts f;
  f.host = o.host;
  f.ib = probe_ib();
  f.ucx = probe_ucx();
  f.cuda = probe_cuda();
  f.memlock = probe_memlock();
  if (o.reach_only && !o.scheduler_address.empty()) {
    f.scheduler.checked = true;
    f.scheduler.address = join_host_port(o.scheduler_address, o.scheduler_port);
    f.scheduler.error = tcp_reach(o.scheduler_address, o.scheduler_port, kReachTimeout);
  } else if (!o.scheduler_address.empty()) {
    f.scheduler = check_scheduler_port(o.scheduler_address, o.scheduler_port);
  }
  f.affinity = o.affinity;
  return f;
}

int run_preflight(const Requirements& job, const PreflightOptions& options, std::ostream& out) {
  const HostFacts facts = probe_host(options);
  const auto checks = judge(facts, job);
  out << format_report(facts, checks);
  out.flush();
  return passes(checks) ? 0 : 1;
}

}  // namespace psrt::preflight
