// psbench suite's arithmetic and layout, free of processes: the size sweep (-b/-e/-f with K/M/G
// suffixes, as nccl-tests take them), one row per measured size with its bandwidths, the
// averages, the --min-bw gate, the nccl-tests-style table and the JSON rows.
//
// Bandwidths, for a tensor of M bytes pushed and pulled by each of N workers through S servers
// in a round of t seconds (GB/s = 1e9 bytes per second, as nccl-tests print them):
//   algbw         = 2·M / t      the bytes of one push+pull round (M up, M down) per second
//   worker busbw  = M / t        per direction, what each worker's link carries
//   server busbw  = N·M / (S·t)  per direction, what each server's link carries
// and, when the link rate B (Gbit/s) is known, each busbw as a fraction of B/8 GB/s. A link
// carries both directions at once, so the bound on a round is t >= (M/B)·max(1, N/S).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace psrt::bench {

// "8", "64K", "4M", "1G" (powers of 1024; k/m/g too). Throws psrt::Error(kInvalidArgument)
// naming the text on anything else, on 0 and past 2^40.
std::size_t parse_size(const std::string& text);

// begin, begin·factor, ... up to and including end (nccl-tests' -b/-e/-f). Throws
// psrt::Error(kInvalidArgument) when begin > end or factor < 2.
std::vector<std::size_t> size_sweep(std::size_t begin, std::size_t end, int factor);

// One measured size of one job, as psbench pushpull reports it.
struct Measurement {
  std::string transport;
  int workers = 1;
  int servers = 1;
  std::size_t size = 0;  // bytes of the tensor (fp32)
  int iters = 0;
  double time_us_p50 = 0;
  double time_us_p99 = 0;
};

struct SuiteRow {
  Measurement m;
  std::size_t count = 0;  // fp32 elements
  double algbw_gbps = 0;  // GB/s, all three at the p50 time
  double worker_busbw_gbps = 0;
  double server_busbw_gbps = 0;
  std::optional<double> worker_link_fraction;  // busbw / link rate, when it is known
  std::optional<double> server_link_fraction;
  std::optional<double> ceiling_gbps;  // ucx_perftest tag_bw at this size
  std::optional<double> bound_us;      // (M/B)·max(1, N/S), when the link is known
};

// link_gbit: the link rate in Gbit/s (nullopt: unknown). Throws psrt::Error(kInvalidArgument) on
// a time that is not positive.
SuiteRow make_row(const Measurement& m, std::optional<double> link_gbit);

// Averages over rows (nccl-tests' "Avg bus bandwidth", per direction).
struct SuiteAverage {
  double worker_busbw_gbps = 0;
  double server_busbw_gbps = 0;
};
SuiteAverage average(const std::vector<SuiteRow>& rows);

// The --min-bw gate on the average worker busbw (GB/s) of one job's rows: nullopt when it holds,
// else the message naming the job, the average and the threshold.
std::optional<std::string> check_min_bw(const std::vector<SuiteRow>& rows, double min_gbps);

// The table of one job (one transport, N, S): a header naming the job, one line per row, the
// footer with the averages.
void print_table(std::ostream& out, const std::vector<SuiteRow>& rows,
                 std::optional<double> link_gbit);

nlohmann::json row_json(const SuiteRow& row);

}  // namespace psrt::bench
