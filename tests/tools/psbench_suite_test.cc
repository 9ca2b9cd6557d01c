// psbench suite run for real: psrun jobs on this host (tcp, tiny sizes), the JSON rows checked
// against the sweep and the bandwidth definitions, the --min-bw gate's exit code and message,
// the ucx_perftest ceiling where it is installed, and bad sizes refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#define PSRT_SCRATCH_PREFIX "psrt_suite_test_"
#include "tests/integration/job_runner.h"

namespace {

using psrt::test::scratch;
using psrt::test::slurp;

struct Result {
  int exit_code = -1;
  std::string out;
};

// psbench with `args`, bounded (timeout kills it past 120 s), stdout and stderr together.
Result psbench(const std::string& args) {
  const std::string cmd =
      "timeout -k 5 120 " + std::string(PSBENCH_PATH) + " " + args + " 2>&1 </dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  Result r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr)
    r.out += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool ucx_perftest_installed() {
  return std::system("command -v ucx_perftest >/dev/null 2>&1") == 0;
}

TEST(PsbenchSuite, TcpSweepWritesOneRowPerSizePerJob) {
  const auto json = scratch("sweep.json");
  const auto r = psbench(
      "suite -b 8 -e 32K -f 8 --transports tcp -n 2 -s 1,2 --iters 5 "
      "--warmup 1 --link-gbps 10 --ceiling off --json " +
      json.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("# psbench suite: transport tcp, 2 workers, 1 servers, 5 rounds per size, "
                       "link 10 Gbit/s"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# Avg bus bandwidth (per direction): worker "), std::string::npos);
  const auto doc = nlohmann::json::parse(slurp(json));
  const std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768};
  EXPECT_EQ(doc["config"]["sizes"], sizes);
  EXPECT_EQ(doc["config"]["launcher"], "local");
  const auto& rows = doc["rows"];
  ASSERT_EQ(rows.size(), 10u) << doc.dump(1);
  ASSERT_EQ(doc["averages"].size(), 2u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const int servers = i < 5 ? 1 : 2;
    const std::size_t size = sizes[i % 5];
    EXPECT_EQ(row["transport"], "tcp");
    EXPECT_EQ(row["workers"], 2);
    EXPECT_EQ(row["servers"], servers);
    EXPECT_EQ(row["size"], size);
    EXPECT_EQ(row["count"], size / 4);
    EXPECT_EQ(row["iters"], 5);
    const double p50 = row["time_us_p50"].get<double>();
    ASSERT_GT(p50, 0) << row.dump();
    EXPECT_GE(row["time_us_p99"].get<double>(), p50);
    const double wbus = row["worker_busbw_GBps"].get<double>();
    EXPECT_DOUBLE_EQ(wbus, static_cast<double>(size) / p50 / 1e3);
    EXPECT_DOUBLE_EQ(row["algbw_GBps"].get<double>(), 2 * wbus);
    EXPECT_DOUBLE_EQ(row["server_busbw_GBps"].get<double>(), wbus * 2 / servers);
    EXPECT_DOUBLE_EQ(row["worker_link_fraction"].get<double>(), wbus / 1.25);
    EXPECT_DOUBLE_EQ(row["bound_us"].get<double>(),
                     static_cast<double>(size) / 1.25e3 * (servers == 1 ? 2 : 1));
    EXPECT_TRUE(row["ceiling_GBps"].is_null());
  }
}

// The PNG signature at the start of `path`.
bool is_png(const std::filesystem::path& path) {
  const std::string head = slurp(path).substr(0, 8);
  return head == std::string("\x89PNG\r\n\x1a\n", 8);
}

Result shell(const std::string& cmd) {
  FILE* p = ::popen(("timeout -k 5 120 " + cmd + " 2>&1 </dev/null").c_str(), "r");
  Result r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr)
    r.out += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(PsbenchSuite, PlotSuiteDrawsBothFiguresFromTheJson) {
  const auto json = scratch("plot.json");
  const auto r = psbench(
      "suite -b 4K -e 64K -f 16 --transports tcp -n 2 -s 1,2 --iters 3 "
      "--warmup 0 --link-gbps 10 --ceiling off --json " +
      json.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto prefix = scratch("plot");
  const auto plot = shell(std::string(PLOT_SUITE_PATH) + " -o " + prefix.string() +
                          " --title test " + json.string());
  ASSERT_EQ(plot.exit_code, 0) << plot.out;
  EXPECT_EQ(plot.out, prefix.string() + "-bandwidth.png\n" + prefix.string() + "-scaling.png\n");
  EXPECT_TRUE(is_png(prefix.string() + "-bandwidth.png"));
  EXPECT_TRUE(is_png(prefix.string() + "-scaling.png"));
  // A size that no row has, and a file that is not the suite's, are refused by name.
  auto bad =
      shell(std::string(PLOT_SUITE_PATH) + " -o " + prefix.string() + " --size 5 " + json.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.out, "plot_suite: --size 5: no row has that size (sizes: [4096, 65536])\n");
  const auto other = scratch("other.json");
  std::ofstream(other) << R"({"rows":[{"transport":"tcp","workers":"two"}]})";
  bad = shell(std::string(PLOT_SUITE_PATH) + " " + other.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.out, "plot_suite: " + other.string() + ": row 0 has no numeric \"workers\"\n");
}

TEST(PsbenchSuite, MinBwGateFailsTheRunNamingTheJob) {
  const auto json = scratch("gate.json");
  const auto r = psbench(
      "suite -b 4K -e 4K --transports tcp -n 1 -s 1 --iters 3 --warmup 0 "
      "--min-bw 1000 --json " +
      json.string());
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("psbench suite: FAILED: tcp with 1 workers and 1 servers: the average "
                       "worker busbw "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" GB/s is below --min-bw 1000.000 GB/s"), std::string::npos) << r.out;
  // The rows are written all the same, with the ceiling where ucx_perftest is installed.
  const auto doc = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(doc["rows"].size(), 1u);
  EXPECT_EQ(doc["config"]["min_bw_GBps"], 1000.0);
  if (ucx_perftest_installed()) {
    EXPECT_GT(doc["rows"][0]["ceiling_GBps"].get<double>(), 0) << doc.dump(1);
  } else {
    EXPECT_TRUE(doc["rows"][0]["ceiling_GBps"].is_null());
  }
  const auto pass = psbench(
      "suite -b 4K -e 4K --transports tcp -n 1 -s 1 --iters 3 --warmup 0 "
      "--ceiling off --min-bw 0");
  EXPECT_EQ(pass.exit_code, 0) << pass.out;
}

TEST(PsbenchSuite, BadSizesAreRefusedWithTheReason) {
  auto r = psbench("suite -b 6 -e 64 --ceiling off");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("-b 6: sizes must be whole fp32 tensors (a multiple of 4 bytes)"),
            std::string::npos)
      << r.out;
  r = psbench("suite -b 8 -e 4X");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("size '4X' has an unknown suffix 'X'"), std::string::npos) << r.out;
  r = psbench("suite -b 1M -e 8 --ceiling off");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("-b 1048576 -e 8: the first size must be positive and at most the last"),
            std::string::npos)
      << r.out;
}

TEST(PsbenchSuite, AFailingJobEndsTheSuiteWithItsOutput) {
  const auto r = psbench("suite -b 8 -e 8 --ceiling off --psrun /bin/false");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("psbench: the job tcp with 2 workers and 1 servers failed (psrun exit "
                       "code 1)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(no output)"), std::string::npos) << r.out;
  // A "psrun" that runs nothing: no rows is an error too, not an empty table.
  const auto echo = psbench("suite -b 8 -e 8 -n 1 --ceiling off --psrun /bin/echo");
  EXPECT_EQ(echo.exit_code, 1) << echo.out;
  EXPECT_NE(echo.out.find("psbench: the job tcp with 1 workers and 1 servers reported 0 of 1 "
                          "sizes; its last lines:\n--transport tcp -n 1 -s 1 -- "),
            std::string::npos)
      << echo.out;
}

}  // namespace
