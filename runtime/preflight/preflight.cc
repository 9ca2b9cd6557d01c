#include "runtime/preflight/preflight.h"

#include <fmt/core.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &res); rc != 0) {
    r.error = fmt::format("resolve {}: {}", address, ::gai_strerror(rc));
    return r;
  }
  const int fd = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 4) != 0) {
    r.error = fmt::format("cannot listen there: {}", std::strerror(errno));
  } else {
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    char port_text[NI_MAXSERV] = {};
    ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, nullptr, 0, port_text,
                  sizeof(port_text), NI_NUMERICSERV);
    const int real_port = std::atoi(port_text);
    if (port == 0) r.address = join_host_port(address, real_port) + " (port 0: any free one)";
    r.error = tcp_reach(address, real_port, kReachTimeout);
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
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
  if (!o.scheduler_address.empty())
    f.scheduler = check_scheduler_port(o.scheduler_address, o.scheduler_port);
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
