#include "runtime/preflight/ib_rate.h"

#include <fmt/core.h>

namespace psrt::preflight {

std::optional<int> ib_width_lanes(int width_code) {
  switch (width_code) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return std::nullopt;
  }
}

std::optional<double> ib_lane_gbps(int speed_code) {
  switch (speed_code) {
    case 1:
      return 2.5;
    case 2:
      return 5.0;
    case 4:  // QDR
    case 8:  // FDR10
      return 10.0;
    case 16:
      return 14.0;
    case 32:
      return 25.0;
    case 64:
      return 50.0;
    case 128:
      return 100.0;
    case 256:
      return 200.0;
    default:
      return std::nullopt;
  }
}

std::string ib_speed_name(int speed_code) {
  switch (speed_code) {
    case 1:
      return "SDR";
    case 2:
      return "DDR";
    case 4:
      return "QDR";
    case 8:
      return "FDR10";
    case 16:
      return "FDR";
    case 32:
      return "EDR";
    case 64:
      return "HDR";
    case 128:
      return "NDR";
    case 256:
      return "XDR";
    default:
      return fmt::format("speed code {}", speed_code);
  }
}

std::optional<double> ib_port_gbps(int width_code, int speed_code) {
  const auto lanes = ib_width_lanes(width_code);
  const auto lane = ib_lane_gbps(speed_code);
  if (!lanes || !lane) return std::nullopt;
  return *lanes * *lane;
}

std::string describe_ib_rate(int width_code, int speed_code) {
  const auto lanes = ib_width_lanes(width_code);
  const auto gbps = ib_port_gbps(width_code, speed_code);
  if (!lanes || !gbps)
    return fmt::format("width code {}, {} (rate unknown)", width_code, ib_speed_name(speed_code));
  return fmt::format("{}x {} ({:g} Gb/s)", *lanes, ib_speed_name(speed_code), *gbps);
}

}  // namespace psrt::preflight
