#include "tools/psrun/job_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace psrt::psrun {

using ps::Metric;

JobReport make_report(const ps::JobMetrics& metrics) {
  JobReport r;
  std::map<std::uint32_t, std::pair<double, double>> lag;  // worker → (seconds, samples)
  for (const auto& p : metrics.processes()) {
    if (p.role == ps::Role::kWorker) {
      WorkerTime w;
      w.rank = p.rank;
      w.host = p.host;
      w.wall = p.value(Metric::kWorkerUptimeSeconds);
      w.wait = p.value(Metric::kWorkerWaitSeconds);
      w.send = p.value(Metric::kWorkerSendSeconds);
      w.compute = std::max(0.0, w.wall - w.wait - w.send);
      w.steps = p.value(Metric::kWorkerSteps);
      w.pushed_bytes = p.value(Metric::kWorkerPushedBytes);
      w.pulled_bytes = p.value(Metric::kWorkerPulledBytes);
      r.workers.push_back(w);
    } else if (p.role == ps::Role::kServer) {
      ServerTime s;
      s.rank = p.rank;
      s.host = p.host;
      s.wall = p.value(Metric::kServerUptimeSeconds);
      s.receive = p.value(Metric::kServerReceiveSeconds);
      s.update = p.value(Metric::kServerUpdateSeconds);  // the histogram's sum
      s.reply = p.value(Metric::kServerReplySeconds);
      s.updates = p.value(Metric::kServerUpdates);
      s.received_bytes = p.value(Metric::kServerReceivedBytes);
      s.sent_bytes = p.value(Metric::kServerSentBytes);
      r.servers.push_back(s);
      for (const auto& [key, v] : p.per_worker) {
        auto& l = lag[key.second];
        (key.first == Metric::kSyncLagSeconds ? l.first : l.second) += v;
      }
    }
  }
  for (auto& w : r.workers) {
    if (auto it = lag.find(w.rank); it != lag.end() && it->second.second > 0) {
      w.lag = it->second.first / it->second.second;
      w.lag_samples = it->second.second;
    }
    if (w.lag_samples > 0) r.stragglers.push_back(w.rank);
  }
  std::sort(r.stragglers.begin(), r.stragglers.end(), [&](std::uint32_t a, std::uint32_t b) {
    auto lag_of = [&](std::uint32_t rank) {
      for (const auto& w : r.workers)
        if (w.rank == rank) return w.lag;
      return 0.0;
    };
    return lag_of(a) > lag_of(b);
  });
  return r;
}

namespace {

std::string pct(double part, double whole) {
  return whole > 0 ? fmt::format("{:5.1f}%", 100 * part / whole) : std::string("    -");
}

}  // namespace

std::string format_report(const JobReport& r) {
  std::string out = "psrun: where the time went\n";
  out += fmt::format("  {:<10} {:>8} {:>16} {:>16} {:>16} {:>8} {:>12}\n", "worker", "wall s",
                     "compute", "waiting on pulls", "pushing", "steps", "sync lag ms");
  for (const auto& w : r.workers)
    out += fmt::format("  {:<10} {:>8.2f} {:>8.2f} {} {:>8.2f} {} {:>8.2f} {} {:>8.0f} {:>12}\n",
                       w.rank, w.wall, w.compute, pct(w.compute, w.wall), w.wait,
                       pct(w.wait, w.wall), w.send, pct(w.send, w.wall), w.steps,
                       w.lag_samples > 0 ? fmt::format("{:.2f}", w.lag * 1e3) : "-");
  out += fmt::format("  {:<10} {:>8} {:>16} {:>16} {:>16} {:>8}\n", "server", "wall s", "receiving",
                     "updating", "replying", "updates");
  for (const auto& s : r.servers)
    out += fmt::format("  {:<10} {:>8.2f} {:>8.2f} {} {:>8.2f} {} {:>8.2f} {} {:>8.0f}\n", s.rank,
                       s.wall, s.receive, pct(s.receive, s.wall), s.update, pct(s.update, s.wall),
                       s.reply, pct(s.reply, s.wall), s.updates);
  out += "  (receiving and replying sum over concurrent transfers and may exceed the wall time)\n";
  if (!r.stragglers.empty()) {
    out += "  stragglers (mean lag behind a sync round's first gradient):";
    for (auto rank : r.stragglers)
      for (const auto& w : r.workers)
        if (w.rank == rank) out += fmt::format(" worker {} {:.2f} ms;", rank, w.lag * 1e3);
    out += "\n";
  }
  return out;
}

std::string report_json(const JobReport& r) {
  nlohmann::json j;
  j["workers"] = nlohmann::json::array();
  for (const auto& w : r.workers)
    j["workers"].push_back({{"rank", w.rank},
                            {"host", w.host},
                            {"wall_s", w.wall},
                            {"compute_s", w.compute},
                            {"wait_s", w.wait},
                            {"send_s", w.send},
                            {"steps", w.steps},
                            {"pushed_bytes", w.pushed_bytes},
                            {"pulled_bytes", w.pulled_bytes},
                            {"sync_lag_s", w.lag},
                            {"sync_lag_samples", w.lag_samples}});
  j["servers"] = nlohmann::json::array();
  for (const auto& s : r.servers)
    j["servers"].push_back({{"rank", s.rank},
                            {"host", s.host},
                            {"wall_s", s.wall},
                            {"receive_s", s.receive},
                            {"update_s", s.update},
                            {"reply_s", s.reply},
                            {"updates", s.updates},
                            {"received_bytes", s.received_bytes},
                            {"sent_bytes", s.sent_bytes}});
  j["stragglers"] = r.stragglers;
  return j.dump(2);
}

}  // namespace psrt::psrun
