// psbench suite's arithmetic with fixed inputs: the -b/-e/-f sweep and its K/M/G sizes, the
// bandwidths of a row, the averages, the --min-bw gate, the table's footer, and where the
// ucx_perftest ceiling is measured for psrun's arguments.
#include "suite_table.h"

#include <gtest/gtest.h>

#include <sstream>

#include "psrt/error.h"
#include "suite_ceiling.h"

namespace psrt::bench {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "(no error)";
}

TEST(SuiteSizes, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("64k"), 65536u);
  EXPECT_EQ(parse_size("4M"), 4194304u);
  EXPECT_EQ(parse_size("256M"), 268435456u);
  EXPECT_EQ(parse_size("1G"), 1073741824u);
  EXPECT_EQ(parse_size("1024G"), std::size_t{1} << 40);
}

TEST(SuiteSizes, BadSizesNameTheText) {
  EXPECT_EQ(error_of([] { parse_size(""); }),
            "size '' is not a byte count (expected e.g. 8, 64K, 4M, 1G)");
  EXPECT_EQ(error_of([] { parse_size("M"); }),
            "size 'M' is not a byte count (expected e.g. 8, 64K, 4M, 1G)");
  EXPECT_EQ(error_of([] { parse_size("-8"); }),
            "size '-8' is not a byte count (expected e.g. 8, 64K, 4M, 1G)");
  EXPECT_EQ(error_of([] { parse_size("4X"); }),
            "size '4X' has an unknown suffix 'X' (K, M or G: powers of 1024)");
  EXPECT_EQ(error_of([] { parse_size("4MB"); }),
            "size '4MB' has an unknown suffix 'MB' (K, M or G: powers of 1024)");
  EXPECT_EQ(error_of([] { parse_size("0"); }), "size '0' is zero");
  EXPECT_EQ(error_of([] { parse_size("1025G"); }), "size '1025G' is larger than 1T");
}

TEST(SuiteSizes, SweepRunsFromBeginToEndByTheFactor) {
  const auto all = size_sweep(8, parse_size("256M"), 2);
  ASSERT_EQ(all.size(), 26u);  // 2^3 .. 2^28
  EXPECT_EQ(all.front(), 8u);
  EXPECT_EQ(all[1], 16u);
  EXPECT_EQ(all.back(), 268435456u);
  EXPECT_EQ(size_sweep(8, 100, 4), (std::vector<std::size_t>{8, 32}));
  EXPECT_EQ(size_sweep(4096, 4096, 2), (std::vector<std::size_t>{4096}));
  EXPECT_EQ(size_sweep(1, std::size_t{1} << 40, 1024),
            (std::vector<std::size_t>{1, 1024, 1048576, 1073741824, std::size_t{1} << 40}));
  EXPECT_EQ(error_of([] { size_sweep(8, 64, 1); }), "-f 1: the step factor must be at least 2");
  EXPECT_EQ(error_of([] { size_sweep(64, 8, 2); }),
            "-b 64 -e 8: the first size must be positive and at most the last");
}

// 4 MiB through 4 workers and 2 servers in 40 ms on a 2 Gbit/s (0.25 GB/s) link.
Measurement four_mib() {
  return {.transport = "tcp",
          .workers = 4,
          .servers = 2,
          .size = 4194304,
          .iters = 10,
          .time_us_p50 = 40000,
          .time_us_p99 = 50000};
}

TEST(SuiteRow, BandwidthsOfOneRound) {
  const SuiteRow r = make_row(four_mib(), 2.0);
  EXPECT_EQ(r.count, 1048576u);
  EXPECT_DOUBLE_EQ(r.algbw_gbps, 0.2097152);         // 2·M / t
  EXPECT_DOUBLE_EQ(r.worker_busbw_gbps, 0.1048576);  // M / t
  EXPECT_DOUBLE_EQ(r.server_busbw_gbps, 0.2097152);  // N·M / (S·t)
  ASSERT_TRUE(r.worker_link_fraction && r.server_link_fraction && r.bound_us);
  EXPECT_DOUBLE_EQ(*r.worker_link_fraction, 0.4194304);
  EXPECT_DOUBLE_EQ(*r.server_link_fraction, 0.8388608);
  EXPECT_DOUBLE_EQ(*r.bound_us, 33554.432);  // M/B · N/S = 16.777 ms · 2
  EXPECT_FALSE(r.ceiling_gbps);
}

TEST(SuiteRow, BoundIsOneModelTimeWhenServersOutnumberWorkers) {
  Measurement m = four_mib();
  m.servers = 8;
  const SuiteRow r = make_row(m, 2.0);
  EXPECT_DOUBLE_EQ(*r.bound_us, 16777.216);
  EXPECT_DOUBLE_EQ(r.server_busbw_gbps, 0.0524288);
}

TEST(SuiteRow, UnknownLinkLeavesFractionsAndBoundOut) {
  const SuiteRow r = make_row(four_mib(), std::nullopt);
  EXPECT_FALSE(r.worker_link_fraction);
  EXPECT_FALSE(r.server_link_fraction);
  EXPECT_FALSE(r.bound_us);
  const auto j = row_json(r);
  EXPECT_TRUE(j["worker_link_fraction"].is_null());
  EXPECT_TRUE(j["bound_us"].is_null());
  EXPECT_EQ(j["count"], 1048576);
  EXPECT_DOUBLE_EQ(j["server_busbw_GBps"].get<double>(), 0.2097152);
}

TEST(SuiteRow, ATimeThatIsNotPositiveIsRefused) {
  Measurement m = four_mib();
  m.time_us_p50 = 0;
  EXPECT_EQ(error_of([&] { make_row(m, 2.0); }),
            "a round time of 0 us at size 4194304 is not positive");
}

TEST(SuiteGate, AverageOfWorkerBusbwAgainstTheThreshold) {
  Measurement half = four_mib();
  half.time_us_p50 = 80000;  // worker busbw 0.0524288
  const std::vector<SuiteRow> rows{make_row(four_mib(), 2.0), make_row(half, 2.0)};
  const SuiteAverage a = average(rows);
  EXPECT_DOUBLE_EQ(a.worker_busbw_gbps, 0.0786432);
  EXPECT_DOUBLE_EQ(a.server_busbw_gbps, 0.1572864);
  EXPECT_FALSE(check_min_bw(rows, 0.0786432));
  EXPECT_FALSE(check_min_bw(rows, 0.05));
  EXPECT_EQ(check_min_bw(rows, 0.08).value_or("(passed)"),
            "tcp with 4 workers and 2 servers: the average worker busbw 0.079 GB/s is below "
            "--min-bw 0.080 GB/s");
}

TEST(SuiteTable, OneLinePerRowAndTheAverageInTheFooter) {
  SuiteRow with_ceiling = make_row(four_mib(), 2.0);
  with_ceiling.ceiling_gbps = 0.24;
  std::ostringstream out;
  print_table(out, {with_ceiling}, 2.0);
  const std::string text = out.str();
  EXPECT_NE(text.find("# psbench suite: transport tcp, 4 workers, 2 servers, 10 rounds per size, "
                      "link 2 Gbit/s\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("     4194304     1048576    40000.0    50000.0     0.210     0.105     "
                      "0.210   41.9   83.9    33554.4    0.240\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# Avg bus bandwidth (per direction): worker 0.105 GB/s, server 0.210 GB/s "
                      "(41.9 % / 83.9 % of the link)\n"),
            std::string::npos)
      << text;
}

TEST(SuiteCeiling, SshJobMeasuresFromTheFirstOtherHostToTheFirstServerHost) {
  std::string why;
  const auto plan = plan_ceiling({"--launcher", "ssh", "--ssh-args", "-i key  -o BatchMode=yes",
                                  "-H", "w1:4,[fd09::12]:2,w3", "--server-hosts=s1,s2"},
                                 why);
  ASSERT_TRUE(plan) << why;
  EXPECT_FALSE(plan->local);
  EXPECT_EQ(plan->server_host, "s1");
  EXPECT_EQ(plan->client_host, "w1");
  EXPECT_EQ(plan->ssh_args, (std::vector<std::string>{"-i", "key", "-o", "BatchMode=yes"}));
  // Without --server-hosts the servers go round-robin over -H: the first host and the next one.
  const auto shared = plan_ceiling({"--launcher=ssh", "--hosts", "fd09::11,h2:1"}, why);
  ASSERT_TRUE(shared) << why;
  EXPECT_EQ(shared->server_host, "fd09::11");
  EXPECT_EQ(shared->client_host, "h2");
  EXPECT_TRUE(shared->ssh_args.empty());
}

TEST(SuiteCeiling, NoPairOfHostsNoCeilingAndTheReason) {
  std::string why;
  EXPECT_FALSE(plan_ceiling({"--launcher", "ssh", "-H", "a:4", "--server-hosts", "a"}, why));
  EXPECT_EQ(why, "every process is on a; no link between two hosts to measure");
  EXPECT_FALSE(plan_ceiling({"--launcher", "ssh", "--hostfile", "hosts.txt"}, why));
  EXPECT_EQ(why, "the ssh job names its hosts in a --hostfile; give -H for a ceiling");
  EXPECT_FALSE(plan_ceiling({"--launcher", "mpi", "-H", "a:4,b:4"}, why));
  EXPECT_EQ(why, "--launcher mpi places the ranks itself; --link-gbps gives the rate");
}

}  // namespace
}  // namespace psrt::bench
