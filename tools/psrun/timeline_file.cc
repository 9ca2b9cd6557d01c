#include "tools/psrun/timeline_file.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "psrt/error.h"

namespace psrt::psrun {

void write_timeline(const ps::JobTimeline& timeline, const std::string& path) {
  const auto processes = timeline.processes();
  std::int64_t origin = std::numeric_limits<std::int64_t>::max();
  for (const auto& [id, p] : processes)
    for (const auto& e : p.events)
      origin = std::min(origin, e.begin_ns);
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json about = nlohmann::json::array();
  for (const auto& [id, p] : processes) {
    const auto& [role, rank] = id;
    // Servers first in the viewer, then workers, each by rank.
    const int pid = (role == ps::Role::kServer ? 1000 : 2000) + static_cast<int>(rank);
    const std::string name = fmt::format("{} {}", ps::to_string(role), rank);
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args", {{"name", fmt::format("{} ({})", name, p.host)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    for (int k = 0; k < static_cast<int>(ps::TimelineKind::kCount); ++k)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", k},
                        {"args", {{"name", ps::to_string(static_cast<ps::TimelineKind>(k))}}}});
    about.push_back({{"process", name},
                     {"role", ps::to_string(role)},
                     {"rank", rank},
                     {"host", p.host},
                     {"clock_uncertainty_us", static_cast<double>(p.uncertainty_ns) / 1e3},
                     {"events", p.events.size()}});
    for (const auto& e : p.events)
      events.push_back({{"ph", "X"},
                        {"name", ps::to_string(e.kind)},
                        {"cat", ps::to_string(role)},
                        {"pid", pid},
                        {"tid", static_cast<int>(e.kind)},
                        {"ts", static_cast<double>(e.begin_ns - origin) / 1e3},
                        {"dur", static_cast<double>(e.dur_ns) / 1e3},
                        {"args", {{"key", e.key}, {"slice", e.slice}, {"arg", e.arg}}}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData",
                           {{"clock",
                             "scheduler steady clock, us from the first "
                             "event"},
                            {"processes", std::move(about)}}}};
  std::ofstream out(path);
  out << trace.dump() << "\n";
  if (!out)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--timeline {}: cannot write the timeline there", path));
}

}  // namespace psrt::psrun
