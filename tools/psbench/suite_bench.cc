#include "suite_bench.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "child_command.h"
#include "psrt/error.h"
#include "runtime/preflight/ib_probe.h"
#include "suite_ceiling.h"
#include "suite_table.h"
#include "transport/factory.h"

namespace psrt::bench {
namespace {

std::string join(const std::vector<std::size_t>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

// The last `lines` lines of `text` ("(no output)" when it is empty).
std::string tail(const std::string& text, std::size_t lines) {
  if (text.empty()) return "(no output)";
  std::size_t start = text.size();
  for (std::size_t n = 0; n <= lines && start > 0; ++n) {
    const auto nl = text.rfind('\n', start - 1);
    if (nl == std::string::npos) return text;
    start = nl;
  }
  return text.substr(start + 1);
}

std::filesystem::path self_exe() {
  return std::filesystem::read_symlink("/proc/self/exe");
}

// The psrun launcher of the job, from the arguments after `--` ("local" when none is named).
std::string launcher_of(const std::vector<std::string>& psrun_args) {
  for (std::size_t i = 0; i < psrun_args.size(); ++i) {
    if (psrun_args[i] == "--launcher" && i + 1 < psrun_args.size()) return psrun_args[i + 1];
    if (psrun_args[i].rfind("--launcher=", 0) == 0) return psrun_args[i].substr(11);
  }
  return "local";
}

std::vector<std::size_t> checked_sizes(const SuiteConfig& c) {
  auto sizes = size_sweep(parse_size(c.begin), parse_size(c.end), c.factor);
  if (sizes.front() % sizeof(float) != 0)
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("-b {}: sizes must be whole fp32 tensors (a multiple of 4 bytes)", c.begin));
  if (sizes.back() > (std::size_t{1} << 31))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("-e {}: psbench pushpull takes tensors up to 2G", c.end));
  return sizes;
}

// One psrun job: N workers of `psbench pushpull` over all sizes.
std::vector<Measurement> run_job(const SuiteConfig& c, const std::string& transport, int n, int s,
                                 const std::vector<std::size_t>& sizes) {
  const std::string psrun =
      c.psrun.empty() ? (self_exe().parent_path() / "psrun").string() : c.psrun;
  std::vector<std::string> argv{psrun, "--transport",    transport, "-n", std::to_string(n),
                                "-s",  std::to_string(s)};
  argv.insert(argv.end(), c.psrun_args.begin(), c.psrun_args.end());
  for (const std::string& a :
       {std::string("--"), self_exe().string(), std::string("pushpull"), std::string("--size"),
        join(sizes), std::string("--iters"), std::to_string(c.iters), std::string("--warmup"),
        std::to_string(c.warmup)})
    argv.push_back(a);
  const std::string job = fmt::format("{} with {} workers and {} servers", transport, n, s);
  std::cerr << "psbench suite: running " << job << "\n";
  const CommandOutput r = run_bounded(argv, {}, std::chrono::seconds(c.timeout_s));
  if (r.timed_out || r.exit_code != 0) {
    throw Error(ErrorCode::kPeerFailed,
                fmt::format("the job {} {} (psrun exit code {}); its last lines:\n{}", job,
                            r.timed_out ? fmt::format("ran past --timeout {} s", c.timeout_s)
                                        : std::string("failed"),
                            r.exit_code, tail(r.out, 15)));
  }
  std::vector<Measurement> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto brace = line.find(R"({"bench":"pushpull")");
    if (brace == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line.substr(brace));
    out.push_back({.transport = transport,
                   .workers = j.at("workers").get<int>(),
                   .servers = j.at("servers").get<int>(),
                   .size = j.at("size").get<std::size_t>(),
                   .iters = j.at("iters").get<int>(),
                   .time_us_p50 = j.at("round_us_p50").get<double>(),
                   .time_us_p99 = j.at("round_us_p99").get<double>()});
  }
  if (out.size() != sizes.size()) {
    throw Error(ErrorCode::kProtocol,
                fmt::format("the job {} reported {} of {} sizes; its last lines:\n{}", job,
                            out.size(), sizes.size(), tail(r.out, 15)));
  }
  return out;
}

nlohmann::json config_json(const SuiteConfig& c, const std::vector<std::size_t>& sizes) {
  return {{"sizes", sizes},
          {"transports", c.transports},
          {"workers", c.workers},
          {"servers", c.servers},
          {"iters", c.iters},
          {"warmup", c.warmup},
          {"link_gbps", c.link_gbit ? nlohmann::json(*c.link_gbit) : nlohmann::json(nullptr)},
          {"min_bw_GBps", c.min_bw ? nlohmann::json(*c.min_bw) : nlohmann::json(nullptr)},
          {"launcher", launcher_of(c.psrun_args)},
          {"psrun_args", c.psrun_args}};
}

void write_json(const std::string& path, const nlohmann::json& doc) {
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  if (!f) throw Error(ErrorCode::kSystem, "--json " + path + ": cannot write the file");
}

}  // namespace

CLI::App* add_suite_command(CLI::App& app, SuiteConfig& c) {
  std::string backends;
  for (const auto& b : transport::available_backends())
    backends += (backends.empty() ? "" : ", ") + b;
  auto* su = app.add_subcommand(
      "suite",
      "sweep of sizes x transports x N workers x S servers through psrun, printed like "
      "nccl-tests (arguments after -- go to psrun, e.g. --launcher ssh -H ...)");
  const auto size_check = CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          parse_size(v);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      "SIZE");
  su->add_option("-b,--minbytes", c.begin, "smallest tensor, bytes (K/M/G suffixes)")
      ->check(size_check)
      ->capture_default_str();
  su->add_option("-e,--maxbytes", c.end, "largest tensor, bytes (K/M/G suffixes)")
      ->check(size_check)
      ->capture_default_str();
  su->add_option("-f,--stepfactor", c.factor, "multiply the size by this from -b to -e")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  su->add_option("--transports", c.transports, "comma-separated: " + backends)
      ->delimiter(',')
      ->check(CLI::IsMember(transport::available_backends()))
      ->capture_default_str();
  su->add_option("-n,--workers", c.workers, "worker counts N, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  su->add_option("-s,--servers", c.servers, "server counts S, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  su->add_option("--iters", c.iters, "measured rounds per size")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  su->add_option("--warmup", c.warmup, "unmeasured rounds per size first")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  su->add_option("--link-gbps", c.link_gbit,
                 "the link rate in Gbit/s: adds each busbw as a fraction of it and the bound "
                 "(M/B)*max(1,N/S); default: the rate of this host's RDMA port that "
                 "UCX_NET_DEVICES names, else its fastest active one (as psrun --preflight "
                 "reports it); none without an RDMA port")
      ->check(CLI::PositiveNumber);
  su->add_option("--min-bw", c.min_bw,
                 "fail (exit code 3) when a job's average worker busbw is below this, GB/s")
      ->check(CLI::NonNegativeNumber);
  su->add_option("--json", c.json_path, "also write the rows (and the ceiling) to this file");
  su->add_option("--ceiling", c.ceiling,
                 "auto: ucx_perftest tag_bw per size as the ceiling: between two processes here "
                 "for a local job, between a server host and a worker host (through ssh) for "
                 "--launcher ssh; off: none")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  su->add_option("--psrun", c.psrun, "the psrun to launch jobs with (default: next to psbench)");
  su->add_option("--timeout", c.timeout_s, "seconds one job may run before it is stopped")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  su->add_option("psrun-args", c.psrun_args, "after --: more psrun options for every job")
      ->expected(-1);
  return su;
}

int run_suite(const SuiteConfig& given) {
  SuiteConfig c = given;
  if (!c.link_gbit) {
    c.link_gbit = preflight::local_link_gbps();
    if (c.link_gbit)
      std::cerr << "psbench suite: link rate " << *c.link_gbit
                << " Gbit/s, this host's RDMA port as psrun --preflight reads it (--link-gbps "
                   "overrides)\n";
  }
  const std::vector<std::size_t> sizes = checked_sizes(c);
  std::optional<CeilingPlan> plan;
  if (c.ceiling == "auto") {
    std::string why_not;
    plan = plan_ceiling(c.psrun_args, why_not);
    if (!plan) std::cerr << "psbench suite: no ucx_perftest ceiling: " << why_not << "\n";
  }
  nlohmann::json doc = {{"config", config_json(c, sizes)},
                        {"rows", nlohmann::json::array()},
                        {"averages", nlohmann::json::array()}};
  std::vector<std::string> failures;
  for (const std::string& transport : c.transports) {
    std::map<std::size_t, std::optional<double>> ceiling;
    if (plan) {
      std::cerr << "psbench suite: ucx_perftest tag_bw ceiling for " << transport
                << (plan->local ? "" : " from " + plan->client_host + " to " + plan->server_host)
                << "\n";
      for (std::size_t size : sizes) {
        ceiling[size] = perftest_gbps(*plan, transport, size);
        if (!ceiling[size]) break;  // the reason is printed; the other sizes would fail alike
      }
    }
    for (int s : c.servers) {
      for (int n : c.workers) {
        std::vector<SuiteRow> rows;
        try {
          for (const Measurement& m : run_job(c, transport, n, s, sizes)) {
            rows.push_back(make_row(m, c.link_gbit));
            if (auto it = ceiling.find(m.size); it != ceiling.end())
              rows.back().ceiling_gbps = it->second;
          }
        } catch (const Error&) {
          if (!c.json_path.empty()) write_json(c.json_path, doc);  // what ran so far
          throw;
        }
        print_table(std::cout, rows, c.link_gbit);
        std::cout.flush();
        for (const auto& r : rows)
          doc["rows"].push_back(row_json(r));
        const SuiteAverage a = average(rows);
        doc["averages"].push_back({{"transport", transport},
                                   {"workers", n},
                                   {"servers", s},
                                   {"worker_busbw_GBps", a.worker_busbw_gbps},
                                   {"server_busbw_GBps", a.server_busbw_gbps}});
        if (c.min_bw) {
          if (auto why = check_min_bw(rows, *c.min_bw)) failures.push_back(*why);
        }
      }
    }
  }
  if (!c.json_path.empty()) write_json(c.json_path, doc);
  for (const auto& why : failures)
    std::cerr << "psbench suite: FAILED: " << why << "\n";
  return failures.empty() ? 0 : 3;
}

}  // namespace psrt::bench
