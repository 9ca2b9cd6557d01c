// psbench suite: a sweep over message sizes, transports, N workers and S servers through the
// parameter server, printed as nccl-tests print theirs (suite_table.h has the arithmetic).
// Every (transport, N, S) is one psrun job whose workers run `psbench pushpull` over all sizes,
// so the suite measures the same path as psbench pushpull; arguments after `--` go to psrun
// (e.g. --launcher ssh -H ... to span hosts). On one host ucx_perftest tag_bw between two
// processes of this host, with the transport's UCX_TLS, is measured per size as the ceiling.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::bench {

struct SuiteConfig {
  std::string begin = "8";   // -b
  std::string end = "256M";  // -e
  int factor = 2;            // -f
  std::vector<std::string> transports{"tcp"};
  std::vector<int> workers{2};
  std::vector<int> servers{1};
  int iters = 20;
  int warmup = 5;
  std::optional<double> link_gbit;  // --link-gbps
  std::optional<double> min_bw;     // --min-bw, GB/s
  std::string json_path;            // --json
  std::string ceiling = "auto";     // auto | off
  std::string psrun;                // default: psrun next to psbench
  int timeout_s = 900;              // per job
  std::vector<std::string> psrun_args;
};

CLI::App* add_suite_command(CLI::App& app, SuiteConfig& config);

// 0 when every job ran and the gate (if any) held; 3 when a job's average is below --min-bw;
// throws psrt::Error naming the job when one fails.
int run_suite(const SuiteConfig& config);

}  // namespace psrt::bench
