// Turning ibv_query_port's active_width and active_speed codes into lanes, a per-lane rate and
// the port's rate in Gb/s (the nominal signalling rate, as ibstat's "Rate" shows it: 4x HDR =
// 200). Pure functions.
#pragma once

#include <optional>
#include <string>

namespace psrt::preflight {

// Lanes of an active_width code: 1 -> 1, 2 -> 4, 4 -> 8, 8 -> 12, 16 -> 2; nullopt for others.
std::optional<int> ib_width_lanes(int width_code);

// Gb/s per lane of an active_speed code: 1 SDR 2.5, 2 DDR 5, 4 QDR 10, 8 FDR10 10, 16 FDR 14,
// 32 EDR 25, 64 HDR 50, 128 NDR 100, 256 XDR 200; nullopt for others.
std::optional<double> ib_lane_gbps(int speed_code);

// "SDR" .. "XDR", or "speed code N" for an unknown one.
std::string ib_speed_name(int speed_code);

// lanes x per-lane rate, nullopt when either code is unknown.
std::optional<double> ib_port_gbps(int width_code, int speed_code);

// "4x HDR (200 Gb/s)", "width code 3, speed code 64 (rate unknown)".
std::string describe_ib_rate(int width_code, int speed_code);

}  // namespace psrt::preflight
