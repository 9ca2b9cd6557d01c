#include "suite_table.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <ostream>

#include "psrt/error.h"

namespace psrt::bench {
namespace {

Error bad(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

constexpr std::size_t kMaxSize = std::size_t{1} << 40;

std::string gbps(double v) {
  return fmt::format("{:.3f}", v);
}

std::string optional_cell(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : std::string("-");
}

}  // namespace

std::size_t parse_size(const std::string& text) {
  const std::string what = "size '" + text + "' ";
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])) != 0)
    ++digits;
  if (digits == 0 || digits > 13)
    throw bad(what + "is not a byte count (expected e.g. 8, 64K, 4M, 1G)");
  std::size_t shift = 0;
  const std::string suffix = text.substr(digits);
  if (suffix == "K" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    throw bad(what + "has an unknown suffix '" + suffix + "' (K, M or G: powers of 1024)");
  }
  const std::size_t n = std::stoull(text.substr(0, digits));
  if (n == 0) throw bad(what + "is zero");
  if (n > (kMaxSize >> shift)) throw bad(what + "is larger than 1T");
  return n << shift;
}

std::vector<std::size_t> size_sweep(std::size_t begin, std::size_t end, int factor) {
  if (factor < 2) throw bad(fmt::format("-f {}: the step factor must be at least 2", factor));
  if (begin == 0 || begin > end)
    throw bad(fmt::format("-b {} -e {}: the first size must be positive and at most the last",
                          begin, end));
  std::vector<std::size_t> sizes;
  for (std::size_t s = begin; s <= end; s *= static_cast<std::size_t>(factor)) {
    sizes.push_back(s);
    if (s > end / static_cast<std::size_t>(factor)) break;
  }
  return sizes;
}

SuiteRow make_row(const Measurement& m, std::optional<double> link_gbit) {
  if (!(m.time_us_p50 > 0))
    throw bad(
        fmt::format("a round time of {} us at size {} is not positive", m.time_us_p50, m.size));
  if (m.workers < 1 || m.servers < 1)
    throw bad(
        fmt::format("{} workers and {} servers: both must be at least 1", m.workers, m.servers));
  SuiteRow r;
  r.m = m;
  r.count = m.size / sizeof(float);
  const auto bytes = static_cast<double>(m.size);
  const double seconds = m.time_us_p50 * 1e-6;
  r.algbw_gbps = 2.0 * bytes / seconds / 1e9;
  r.worker_busbw_gbps = bytes / seconds / 1e9;
  r.server_busbw_gbps = bytes * m.workers / m.servers / seconds / 1e9;
  if (link_gbit) {
    const double link_gbps = *link_gbit / 8.0;  // GB/s per direction
    r.worker_link_fraction = r.worker_busbw_gbps / link_gbps;
    r.server_link_fraction = r.server_busbw_gbps / link_gbps;
    const double load = std::max(1.0, static_cast<double>(m.workers) / m.servers);
    r.bound_us = bytes / (link_gbps * 1e9) * load * 1e6;
  }
  return r;
}

SuiteAverage average(const std::vector<SuiteRow>& rows) {
  SuiteAverage a;
  if (rows.empty()) return a;
  for (const auto& r : rows) {
    a.worker_busbw_gbps += r.worker_busbw_gbps;
    a.server_busbw_gbps += r.server_busbw_gbps;
  }
  a.worker_busbw_gbps /= static_cast<double>(rows.size());
  a.server_busbw_gbps /= static_cast<double>(rows.size());
  return a;
}

std::optional<std::string> check_min_bw(const std::vector<SuiteRow>& rows, double min_gbps) {
  if (rows.empty()) return std::nullopt;
  const SuiteAverage a = average(rows);
  if (a.worker_busbw_gbps >= min_gbps) return std::nullopt;
  const Measurement& m = rows.front().m;
  return fmt::format(
      "{} with {} workers and {} servers: the average worker busbw {} GB/s is below --min-bw {} "
      "GB/s",
      m.transport, m.workers, m.servers, gbps(a.worker_busbw_gbps), gbps(min_gbps));
}

void print_table(std::ostream& out, const std::vector<SuiteRow>& rows,
                 std::optional<double> link_gbit) {
  if (rows.empty()) return;
  const Measurement& m = rows.front().m;
  out << fmt::format("# psbench suite: transport {}, {} workers, {} servers, {} rounds per size",
                     m.transport, m.workers, m.servers, m.iters);
  out << (link_gbit ? fmt::format(", link {} Gbit/s\n", *link_gbit)
                    : std::string(", link rate unknown (--link-gbps)\n"));
  out << "#  busbw per direction; %link = busbw / link rate; bound = (M/B)·max(1, N/S); ceiling = "
         "ucx_perftest tag_bw\n";
  out << fmt::format("# {:>10} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10} {:>8}\n",
                     "size", "count", "p50", "p99", "algbw", "wrk bus", "srv bus", "wrk", "srv",
                     "bound", "ceiling");
  out << fmt::format("# {:>10} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10} {:>8}\n",
                     "(B)", "(elements)", "(us)", "(us)", "(GB/s)", "(GB/s)", "(GB/s)", "%link",
                     "%link", "(us)", "(GB/s)");
  for (const auto& r : rows) {
    const auto pct = [](const std::optional<double>& f) {
      return f ? std::optional<double>(*f * 100.0) : std::nullopt;
    };
    out << fmt::format(
        "  {:>10} {:>11} {:>10.1f} {:>10.1f} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10} "
        "{:>8}\n",
        r.m.size, r.count, r.m.time_us_p50, r.m.time_us_p99, gbps(r.algbw_gbps),
        gbps(r.worker_busbw_gbps), gbps(r.server_busbw_gbps),
        optional_cell(pct(r.worker_link_fraction), "{:.1f}"),
        optional_cell(pct(r.server_link_fraction), "{:.1f}"), optional_cell(r.bound_us, "{:.1f}"),
        optional_cell(r.ceiling_gbps, "{:.3f}"));
  }
  const SuiteAverage a = average(rows);
  out << fmt::format("# Avg bus bandwidth (per direction): worker {} GB/s, server {} GB/s",
                     gbps(a.worker_busbw_gbps), gbps(a.server_busbw_gbps));
  if (link_gbit) {
    out << fmt::format(" ({:.1f} % / {:.1f} % of the link)",
                       a.worker_busbw_gbps / (*link_gbit / 8.0) * 100.0,
                       a.server_busbw_gbps / (*link_gbit / 8.0) * 100.0);
  }
  out << "\n#\n";
}

nlohmann::json row_json(const SuiteRow& r) {
  const auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"transport", r.m.transport},
          {"workers", r.m.workers},
          {"servers", r.m.servers},
          {"size", r.m.size},
          {"count", r.count},
          {"iters", r.m.iters},
          {"time_us_p50", r.m.time_us_p50},
          {"time_us_p99", r.m.time_us_p99},
          {"algbw_GBps", r.algbw_gbps},
          {"worker_busbw_GBps", r.worker_busbw_gbps},
          {"server_busbw_GBps", r.server_busbw_gbps},
          {"worker_link_fraction", opt(r.worker_link_fraction)},
          {"server_link_fraction", opt(r.server_link_fraction)},
          {"bound_us", opt(r.bound_us)},
          {"ceiling_GBps", opt(r.ceiling_gbps)}};
}

}  // namespace psrt::bench
