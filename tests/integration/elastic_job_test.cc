// Elastic jobs on 127.0.0.1 (docs/elastic.md): backup workers in sync mode, and workers that join
// a running job (psrun --join-file / --join). psrun runs elastic_worker processes; every round
// each slice applied is checked against the closed form over the workers the servers' update
// trace (PSRT_SERVER_TRACE) says it applied.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_elastic_job_test_"
#include "tests/integration/job_runner.h"
#include "transport/factory.h"

namespace {

namespace fs = std::filesystem;

using psrt::test::Run;
using psrt::test::scratch;

Run psrun(const std::string& env, const std::string& args, const std::string& worker_args) {
  return psrt::test::run_psrun_bounded(env, args, ELASTIC_WORKER_PATH " " + worker_args,
                                       std::chrono::seconds(60));
}

// The trace: for each key (every key here is one slice), the ranks of each version's update.
using Rounds = std::map<std::uint64_t, std::map<std::uint64_t, std::vector<std::uint32_t>>>;

Rounds read_rounds(const fs::path& p) {
  Rounds rounds;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["slice"].get<std::uint32_t>(), 0u) << line;
    auto& ranks = rounds[j["key"].get<std::uint64_t>()][j["version"].get<std::uint64_t>()];
    EXPECT_TRUE(ranks.empty()) << "version applied twice: " << line;
    for (auto& r : j["ranks"])
      ranks.push_back(r.get<std::uint32_t>());
  }
  return rounds;
}

// The weights' T (elastic_worker_main.cc) after each version of a key: the sum (or, mean, the
// fp32 mean the servers compute) of c * 4^rank over the gradients each round v applied, where
// c = 1 + (v - 1)%2: every gradient of round v was computed from version v - 1.
std::map<std::uint64_t, double> closed_form(
    const std::map<std::uint64_t, std::vector<std::uint32_t>>& versions, bool mean) {
  std::map<std::uint64_t, double> t{{0, 0.0}};
  float w = 0.f;  // mean: the weight of a pattern-1 element, as the fp32 update makes it
  double sum = 0;
  for (const auto& [v, ranks] : versions) {
    double round = 0;
    for (auto r : ranks)
      round += static_cast<double>((1 + (v - 1) % 2) * (1u << (2 * r)));
    if (mean) {
      const float scale = 1.f / static_cast<float>(ranks.size());
      w -= static_cast<float>(round) * scale;
      t[v] = -static_cast<double>(w);
    } else {
      sum += round;
      t[v] = sum;
    }
  }
  return t;
}

struct State {
  int rank;
  std::uint64_t key, version;
  double t;
  std::uint32_t round_workers;
  std::uint64_t dropped;
};

std::vector<State> states(const std::string& out) {
  std::vector<State> s;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto p = line.find("STATE ");  // after psrun's "[worker r] "
    if (p == std::string::npos) continue;
    std::istringstream f(line.substr(p + 6));
    State x{};
    f >> x.rank >> x.key >> x.version >> x.t >> x.round_workers >> x.dropped;
    s.push_back(x);
  }
  return s;
}

std::uint64_t dropped_of(const std::string& out, int rank) {
  const std::string tag = "DROPPED " + std::to_string(rank) + " ";
  const auto p = out.find(tag);
  return p == std::string::npos ? 0 : std::stoull(out.substr(p + tag.size()));
}

// Checks every version of every key against the workers its round applied, and every state a
// worker saw against the closed form of its version; returns the rounds run without `rank`.
int check_rounds(const Run& r, const fs::path& trace, std::uint64_t keys, std::uint64_t rounds,
                 std::size_t quorum, bool mean, int rank) {
  const Rounds all = read_rounds(trace);
  EXPECT_EQ(all.size(), keys);
  std::map<std::uint64_t, std::map<std::uint64_t, double>> t;
  int without = 0;
  for (const auto& [key, versions] : all) {
    EXPECT_EQ(versions.size(), rounds) << "key " << key;
    std::uint64_t expect = 1;
    for (const auto& [v, ranks] : versions) {
      EXPECT_EQ(v, expect++) << "key " << key << ": versions 1, 2, ... each once";
      EXPECT_GE(ranks.size(), quorum) << "key " << key << " version " << v;
      if (std::find(ranks.begin(), ranks.end(), static_cast<std::uint32_t>(rank)) == ranks.end())
        ++without;
    }
    t[key] = closed_form(versions, mean);
  }
  const auto seen = states(r.out);
  EXPECT_GT(seen.size(), rounds) << r.out;
  for (const auto& s : seen) {
    if (!t.count(s.key) || !t[s.key].count(s.version)) {
      ADD_FAILURE() << "rank " << s.rank << " saw key " << s.key << " version " << s.version
                    << ", which the trace does not hold";
      continue;
    }
    if (mean)
      EXPECT_NEAR(s.t, t[s.key][s.version], 1e-6 * t[s.key][s.version]) << s.version;
    else
      EXPECT_EQ(s.t, t[s.key][s.version])
          << "rank " << s.rank << " key " << s.key << " version " << s.version;
    EXPECT_EQ(s.round_workers, all.at(s.key).at(s.version).size())
        << "rank " << s.rank << " key " << s.key << " version " << s.version;
  }
  return without;
}

// b = 1, 4 workers, rank 3 five times slower than the others: each slice's round runs with the
// first 3 gradients, rank 3's late pushes are dropped (its handle says so; the server logs them
// and names it), every round equals the closed form over the workers it applied, the job ends.
TEST(BackupWorkers, RoundsRunWithTheFirstNMinusBAndEqualTheirClosedForm) {
  auto trace = scratch("backup_trace.jsonl");
  auto r = psrun("PSRT_SERVER_TRACE=" + trace.string(),
                 "--transport tcp -n 4 -s 2 --aggregate sum --lr 1 --backup-workers 1",
                 "rounds --rounds 40 --sizes 7,1000,3000 --slow-rank 3 --slow-ms 25 --pace-ms 5");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS rounds"), 4) << r.out;
  const int without3 = check_rounds(r, trace, 3, 40, 3, false, 3);
  EXPECT_GE(without3, 3 * 40 / 2) << "rank 3 was waited for: " << r.out;
  EXPECT_GT(dropped_of(r.out, 3), 0u) << r.out;
  EXPECT_GE(r.count("late pushes dropped (worker 3: "), 1) << r.out;  // the servers' totals
  EXPECT_NE(r.out.find("worker 3 was the last in the last 10 rounds in a row"), std::string::npos)
      << r.out;
}

// The mean divides by the gradients a round applied (3 or 4), not by the workers.
TEST(BackupWorkers, TheMeanDividesByTheGradientsApplied) {
  auto trace = scratch("backup_mean_trace.jsonl");
  auto r =
      psrun("PSRT_SERVER_TRACE=" + trace.string(), "--transport tcp -n 4 --lr 1 --backup-workers 1",
            "rounds --rounds 20 --sizes 5 --mean 1 --slow-rank 0 --slow-ms 20 --pace-ms 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  check_rounds(r, trace, 1, 20, 3, true, 0);
}

// b = 0: every round waits for every worker, as without the flag; nothing is dropped.
TEST(BackupWorkers, ZeroWaitsForEveryWorker) {
  auto trace = scratch("backup0_trace.jsonl");
  auto r = psrun("PSRT_SERVER_TRACE=" + trace.string(),
                 "--transport tcp -n 4 --aggregate sum --lr 1 --backup-workers 0",
                 "rounds --rounds 8 --sizes 7 --slow-rank 3 --slow-ms 20");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(check_rounds(r, trace, 1, 8, 4, false, 3), 0);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(dropped_of(r.out, k), 0u) << r.out;
  EXPECT_EQ(r.count("backup workers"), 0) << r.out;
}

TEST(BackupWorkers, CombinationsTheJobCannotRunAreRefused) {
  auto async = psrun("", "--transport tcp -n 2 --mode async --backup-workers 1", "rounds");
  EXPECT_NE(async.rc, 0);
  EXPECT_EQ(async.count("--backup-workers 1 needs --mode sync"), 1) << async.out;
  auto all = psrun("", "--transport tcp -n 2 --backup-workers 2", "rounds");
  EXPECT_NE(all.rc, 0);
  EXPECT_EQ(all.count("use fewer backup workers than -n"), 1) << all.out;
  auto replicas = psrun("", "--transport tcp -n 2 -s 2 --replicas 2 --backup-workers 1", "rounds");
  EXPECT_NE(replicas.rc, 0);
  EXPECT_EQ(replicas.count("cannot be combined with --replicas 2"), 1) << replicas.out;
  auto env = psrun("PSRT_BACKUP_WORKERS=1", "--transport tcp -n 2 --mode ssp", "rounds");
  EXPECT_NE(env.rc, 0);
  EXPECT_EQ(env.count("--backup-workers 1 needs --mode sync"), 1) << env.out;
}

// A worker started by hand while a 3-worker sync job runs (psrun --join FILE -- COMMAND, FILE
// from the job's --join-file): it joins between rounds, pulls the current weights, and from its
// first push on every round waits for it; every round stays exact over the workers it applied.
class JoinTest : public ::testing::TestWithParam<std::string> {};

TEST_P(JoinTest, AJoinerCountsFromTheNextRoundAndSumsStayExact) {
  auto trace = scratch("join_trace.jsonl");
  auto join = scratch("join.env");
  auto log = scratch("join_job.txt");
  const std::string worker =
      std::string(ELASTIC_WORKER_PATH) + " rounds --rounds 30 --sizes 7,1000";
  psrt::test::ProcessGroup job(
      psrt::test::psrun_command("PSRT_SERVER_TRACE=" + trace.string() + " exec",
                                "--transport " + GetParam() +
                                    " -n 3 -s 2 --aggregate sum --lr 1 --join-file " +
                                    join.string(),
                                worker + " --pace-ms 40"),
      log);
  // Once the job has run a few rounds, the joiner starts.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(join) || psrt::test::count(psrt::test::slurp(trace), "\n") < 6))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(join)) << job.out();
  EXPECT_EQ(fs::status(join).permissions() & (fs::perms::group_all | fs::perms::others_all),
            fs::perms::none)
      << "the join file holds the secret";
  auto joiner = psrt::test::run_psrun_bounded("", "--join " + join.string(), worker,
                                              std::chrono::seconds(40));
  EXPECT_EQ(joiner.rc, 0) << joiner.out;
  EXPECT_EQ(joiner.count("PASS rounds rank 3"), 1) << joiner.out;
  ASSERT_EQ(job.wait(std::chrono::seconds(40)), 0) << job.out();
  EXPECT_FALSE(fs::exists(join)) << "the join file outlived its job";
  psrt::test::Run all;
  all.rc = 0;
  all.out = job.out() + joiner.out;
  EXPECT_EQ(all.count("PASS rounds"), 4) << all.out;
  check_rounds(all, trace, 2, 30, 3, false, 3);
  // Rank 3 is in no round before its first and in every round from it on.
  for (const auto& [key, versions] : read_rounds(trace)) {
    std::uint64_t first = 0;
    for (const auto& [v, ranks] : versions) {
      const bool has3 = std::find(ranks.begin(), ranks.end(), 3u) != ranks.end();
      if (has3 && first == 0) first = v;
      if (first != 0) {
        EXPECT_TRUE(has3) << "key " << key << " version " << v << " without rank 3";
      }
      EXPECT_EQ(ranks.size(), has3 ? 4u : 3u) << "key " << key << " version " << v;
    }
    EXPECT_GT(first, 1u) << "key " << key << ": the joiner was in the first round";
    EXPECT_LE(first, 30u) << "key " << key << ": the joiner never took part";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, JoinTest,
                         ::testing::ValuesIn(psrt::transport::available_backends()));

TEST(Join, AJoinFileThatIsNotPrivateOrNotOneIsRefused) {
  auto f = scratch("bad.env");
  std::ofstream(f) << "PSRT_SCHEDULER=127.0.0.1:1\nPSRT_SECRET=x\n";
  fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  auto open = psrt::test::run_psrun("", "--join " + f.string(), "/bin/true");
  EXPECT_EQ(open.rc, 2);
  EXPECT_EQ(open.count("chmod 600"), 1) << open.out;
  fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(f) << "hello\n";
  auto other = psrt::test::run_psrun("", "--join " + f.string(), "/bin/true");
  EXPECT_EQ(other.rc, 2);
  EXPECT_EQ(other.count("is not NAME=VALUE"), 1) << other.out;
}

}  // namespace
