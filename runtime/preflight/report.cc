#include "runtime/preflight/report.h"

#include <fmt/core.h>

#include "runtime/preflight/ib_rate.h"

namespace psrt::preflight {
namespace {

void row(std::string& out, const std::string& key, const std::string& value) {
  out += fmt::format("  {:<15}{}\n", key, value);
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items)
    s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::string ucx_row(const UcxFacts& u) {
  if (!u.built) return "not built in (no libucx-dev at build time)";
  std::string s = u.version + "; UCX_TLS=" + (u.tls.empty() ? "(unset: all)" : u.tls);
  if (!u.error.empty()) return s + "; does not start: " + u.error;
  s += "; transports: " + (u.transports.empty() ? std::string("?") : join(u.transports));
  return s + "; CUDA memory: " + (u.cuda_memory ? "yes" : "no");
}

std::string limit(const std::optional<std::uint64_t>& v) {
  return v ? format_bytes(*v) : std::string("unlimited");
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kPass:
      return "PASS";
    case Level::kWarn:
      return "WARN";
    default:
      return "FAIL";
  }
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:g} {}", v, units[u]);
}

std::string format_report(const HostFacts& f, const std::vector<Check>& checks) {
  std::string out = fmt::format("preflight: host {}\n", f.host);
  row(out, "UCX", ucx_row(f.ucx));
  if (f.ib.ports.empty()) {
    row(out, "RDMA devices",
        "none (" +
            (f.ib.error.empty() ? std::string("ibv_get_device_list found no device") : f.ib.error) +
            ")");
  } else {
    for (const auto& p : f.ib.ports)
      row(out, fmt::format("{}:{}", p.device, p.port),
          fmt::format("{} {} {}", p.state, p.link_layer,
                      describe_ib_rate(p.width_code, p.speed_code)));
  }
  row(out, "locked memory",
      fmt::format("{} (hard limit {})", limit(f.memlock.soft), limit(f.memlock.hard)));
  if (f.cuda.devices.empty()) {
    row(out, "CUDA", "no device: " + f.cuda.why);
  } else {
    std::string driver = f.cuda.driver_version
                             ? fmt::format("driver {}.{}", f.cuda.driver_version / 1000,
                                           f.cuda.driver_version % 1000 / 10)
                             : std::string("driver ?");
    for (std::size_t i = 0; i < f.cuda.devices.size(); ++i)
      row(out, fmt::format("cuda:{}", i), f.cuda.devices[i] + " (" + driver + ")");
  }
  for (const auto& a : f.affinity)
    row(out, "GPU-NIC", a);
  if (f.scheduler.checked)
    row(out, "scheduler",
        f.scheduler.address +
            (f.scheduler.error.empty() ? " reachable" : ": " + f.scheduler.error));
  int failed = 0;
  for (const auto& c : checks) {
    out += fmt::format("  {}  {}\n", level_name(c.level), c.what);
    if (!c.fix.empty()) out += fmt::format("        what to do: {}\n", c.fix);
    failed += c.level == Level::kFail;
  }
  out += failed == 0 ? fmt::format("preflight: {} passes\n", f.host)
                     : fmt::format("preflight: {} FAILS ({} of {} checks)\n", f.host, failed,
                                   checks.size());
  return out;
}

}  // namespace psrt::preflight
