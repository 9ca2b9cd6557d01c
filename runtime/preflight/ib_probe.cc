#include "runtime/preflight/ib_probe.h"

#include <fmt/core.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/preflight/ib_rate.h"

namespace psrt::preflight {
namespace {

std::string link_layer_name(std::uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unknown";
  }
}

void probe_device(ibv_device* dev, IbFacts& out) {
  const std::string name = ibv_get_device_name(dev);
  ibv_context* ctx = ibv_open_device(dev);
  if (!ctx) {
    out.error += fmt::format("{}{}: ibv_open_device: {}", out.error.empty() ? "" : "; ", name,
                             std::strerror(errno));
    return;
  }
  ibv_device_attr attr{};
  if (ibv_query_device(ctx, &attr) == 0) {
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, static_cast<std::uint8_t>(p), &pa) != 0) continue;
      out.ports.push_back({name, p, ibv_port_state_str(pa.state), link_layer_name(pa.link_layer),
                           pa.active_width, pa.active_speed});
    }
  } else {
    out.error += fmt::format("{}{}: ibv_query_device failed", out.error.empty() ? "" : "; ", name);
  }
  ibv_close_device(ctx);
}

}  // namespace

IbFacts probe_ib() {
  IbFacts out;
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    // ENOSYS: the kernel offers no RDMA here (no /sys/class/infiniband).
    const int e = errno ? errno : ENODEV;
    out.error = e == ENOSYS ? "no RDMA support in this kernel: ibv_get_device_list: " +
                                  std::string(std::strerror(e))
                            : "ibv_get_device_list: " + std::string(std::strerror(e));
    return out;
  }
  out.devices = n;
  for (int i = 0; i < n; ++i)
    probe_device(list[i], out);
  ibv_free_device_list(list);
  return out;
}

std::optional<double> link_gbps(const IbFacts& ib, std::string_view net_devices) {
  std::optional<double> best;
  auto consider = [&](const IbPort& p) {
    if (!p.active()) return;
    const auto g = ib_port_gbps(p.width_code, p.speed_code);
    if (g && (!best || *g > *best)) best = g;
  };
  if (!net_devices.empty() && net_devices != "all") {
    std::stringstream names{std::string(net_devices)};
    for (std::string item; std::getline(names, item, ',');) {
      for (const auto& p : ib.ports) {
        if (item == fmt::format("{}:{}", p.device, p.port) || item == p.device) consider(p);
      }
      if (best) return best;
    }
    return best;
  }
  for (const auto& p : ib.ports)
    consider(p);
  return best;
}

std::optional<double> local_link_gbps() {
  const char* nd = std::getenv("UCX_NET_DEVICES");
  return link_gbps(probe_ib(), nd ? nd : "");
}

}  // namespace psrt::preflight
