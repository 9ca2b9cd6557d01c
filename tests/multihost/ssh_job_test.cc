// Jobs across hosts (network namespaces, tests/multihost/netns_hosts.h) started by psrun
// --launcher ssh: psrun and its scheduler on host 0, servers and workers on the hosts through
// each host's own sshd. Exact results over tcp and ucx with the links' byte counters showing
// that the gradients crossed them; a host killed, a link cut, psrun SIGKILLed: named errors
// within the bound and no psrt process left on any host; a failed job restarted on its hosts
// (--max-restarts), and with --min-workers on the hosts that remain; a wrong secret from
// another host.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_ssh_job_test_"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool has_ucx() {
#ifdef PSRT_TEST_HAVE_UCX
  return true;
#else
  return false;
#endif
}

// psrun on host 0: `--launcher ssh --ssh-args "<the fixture's key and options>" ARGS -- ps_worker
// WORKER`, with ENV in front, output to `log`.
std::string psrun_on_host0(const Hosts& hosts, const std::string& env, const std::string& args,
                           const std::string& worker) {
  return "exec " + hosts.exec_prefix(0) + " env " + env + " " PSRUN_PATH +
         " --launcher ssh --ssh-args '" + hosts.ssh_args_string() + "' " + args +
         " -- " PS_WORKER_PATH " " + worker;
}

// The processes on host i running one of `programs`.
std::vector<pid_t> pids_running(const Hosts& hosts, int i,
                                const std::vector<std::string>& programs) {
  std::vector<pid_t> out;
  for (pid_t p : hosts.pids(i)) {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(p) + "/exe", ec);
    if (!ec && std::find(programs.begin(), programs.end(), exe.string()) != programs.end())
      out.push_back(p);
  }
  return out;
}

// The psrt processes (psrun, ps_worker) running on host i.
std::vector<pid_t> psrt_pids(const Hosts& hosts, int i) {
  return pids_running(hosts, i, {PSRUN_PATH, PS_WORKER_PATH});
}

// Waits until no process of `programs` runs on any host; the seconds it took, or -1.
double wait_none_running(const Hosts& hosts, const std::vector<std::string>& programs,
                         std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    bool any = false;
    for (int i = 0; i < hosts.size(); ++i)
      any = any || !pids_running(hosts, i, programs).empty();
    if (!any) return std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(20ms);
  }
  return -1;
}

// Waits until no psrt process is left on any host; the seconds it took, or -1 past `limit`.
double wait_no_psrt_process(const Hosts& hosts, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    bool any = false;
    for (int i = 0; i < hosts.size(); ++i)
      any = any || !psrt_pids(hosts, i).empty();
    if (!any) return std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(20ms);
  }
  return -1;
}

// Waits for `n` lines containing `needle` in the job's output.
bool wait_output(const ProcessGroup& job, const std::string& needle, int n,
                 std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (count(job.out(), needle) >= n) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// psrun's own lines ("psrun: ..."), and remote sides' ("psrt remote ..."), for the test's log.
void show_verdict(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.find("psrun: ") != std::string::npos ||
        line.find("psrt remote") != std::string::npos || line.find("ERROR") != std::string::npos)
      std::printf("  | %s\n", line.c_str());
}

struct Traffic {
  std::vector<std::uint64_t> tx, rx;
};
Traffic traffic(const Hosts& hosts) {
  Traffic t;
  for (int i = 0; i < hosts.size(); ++i) {
    t.tx.push_back(hosts.tx_bytes(i));
    t.rx.push_back(hosts.rx_bytes(i));
  }
  return t;
}

class SshJob : public ::testing::TestWithParam<std::string> {};

// Scheduler on host 0 (A), servers on B and C, workers 0..3 on A, B, C, A: every gradient of A's
// two workers leaves A (no server there) and their weights come back over A's link.
TEST_P(SshJob, ThreeHostsSumExactlyAndTheGradientsCrossTheLinks) {
  SKIP_WITHOUT_HOSTS();
  if (GetParam() == "ucx" && !has_ucx()) GTEST_SKIP() << "built without UCX";
  Hosts hosts(3, {.sshd = true});
  const std::string a = hosts.address(0), b = hosts.address(1), c = hosts.address(2);
  const int rounds = 3;
  const std::vector<long> sizes = {1, 7, 1000, 4099, 262147};
  long floats = 0;
  for (long s : sizes)
    floats += s;
  const auto before = traffic(hosts);
  const auto log = scratch("exact.txt");
  ProcessGroup job(
      psrun_on_host0(hosts, "UCX_TLS=tcp UCX_NET_DEVICES=eth0",
                     "--transport " + GetParam() + " -n 4 -s 2 --lr 1 --partition-bytes 65536 -H " +
                         a + ":2," + b + ":1," + c + ":1 --server-hosts " + b + "," + c,
                     "exact --rounds " + std::to_string(rounds) + " --sizes 1,7,1000,4099,262147"),
      log);
  const int rc = job.wait(120s);
  const std::string out = job.out();
  if (std::getenv("PSRT_TEST_SHOW")) std::printf("%s\n", out.c_str());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "PASS exact"), 4) << out;
  for (const auto& placed :
       {"[server 0@" + b + "]", "[server 1@" + c + "]", "[worker 0@" + a + "] PASS",
        "[worker 1@" + b + "] PASS", "[worker 2@" + c + "] PASS", "[worker 3@" + a + "] PASS"})
    EXPECT_NE(out.find(placed), std::string::npos) << placed << "\n" << out;
  EXPECT_NE(out.find("scheduler at " + a + ":"), std::string::npos) << out;
  // Across hosts over byte streams psrun paces the job (tools/psrun/pacing.h), but the slices
  // given by --partition-bytes stay: only the send window is psrun's.
  EXPECT_NE(out.find("the job spans 3 hosts over TCP byte streams: PSRT_SEND_WINDOW=131072 ("),
            std::string::npos)
      << out;
  const auto after = traffic(hosts);
  // Host A's two workers push `rounds` gradients of every size to B and C and pull the weights.
  const std::uint64_t grads = 2ull * rounds * static_cast<std::uint64_t>(floats) * 4;
  EXPECT_GT(after.tx[0] - before.tx[0], grads) << out;
  EXPECT_GT(after.rx[0] - before.rx[0], grads) << out;
  // B and C serve: each gets about half of every worker's gradients.
  EXPECT_GT(after.rx[1] - before.rx[1], grads / 2) << out;
  EXPECT_GT(after.rx[2] - before.rx[2], grads / 2) << out;
  EXPECT_GE(wait_no_psrt_process(hosts, 5s), 0) << "a psrt process was left on a host";
}

TEST_P(SshJob, AsyncAppliesEveryPushOnceAcrossHosts) {
  SKIP_WITHOUT_HOSTS();
  if (GetParam() == "ucx" && !has_ucx()) GTEST_SKIP() << "built without UCX";
  Hosts hosts(3, {.sshd = true});
  const auto log = scratch("async.txt");
  ProcessGroup job(
      psrun_on_host0(hosts, "UCX_TLS=tcp UCX_NET_DEVICES=eth0",
                     "--transport " + GetParam() + " -n 4 -s 2 --mode async --lr 1 -H " +
                         hosts.address(0) + ":2," + hosts.address(1) + ":1," + hosts.address(2) +
                         ":1 --server-hosts " + hosts.address(1) + "," + hosts.address(2),
                     "async --rounds 20 --sizes 4099"),
      log);
  const int rc = job.wait(120s);
  ASSERT_EQ(rc, 0) << job.out();
  EXPECT_EQ(count(job.out(), "PASS async"), 4) << job.out();
  EXPECT_NE(job.out().find("the job spans 3 hosts over TCP byte streams: balanced slices of at "
                           "most 131072 B and PSRT_SEND_WINDOW=131072 ("),
            std::string::npos)
      << job.out();
}

INSTANTIATE_TEST_SUITE_P(Transports, SshJob, ::testing::Values("tcp", "ucx"));

constexpr const char* kJobSecret = "the-held-jobs-secret-0123456789-0123456789";

// A job of 3 hosts that holds (rounds of exact sums until the stop file exists), with every
// worker past its first round; PSRT_PEER_TIMEOUT_MS=3000.
struct HeldJob {
  Hosts& hosts;
  std::filesystem::path stop = scratch("stop");
  ProcessGroup job;
  explicit HeldJob(Hosts& h, const std::string& log_name)
      : hosts(h),
        job(psrun_on_host0(h, std::string("PSRT_PEER_TIMEOUT_MS=3000 PSRT_SECRET=") + kJobSecret,
                           "--transport tcp -n 3 -s 2 --aggregate sum --lr 1 -H " + h.address(0) +
                               "," + h.address(1) + "," + h.address(2) + " --server-hosts " +
                               h.address(0) + "," + h.address(1),
                           "hold --stop-file " + stop.string()),
            scratch(log_name)) {}
  // Every worker past its first round, and psrt processes running on every host.
  bool started() {
    if (!wait_output(job, "HOLDING rank", 3, 60s)) return false;
    for (int i = 0; i < hosts.size(); ++i)
      if (psrt_pids(hosts, i).empty()) {
        ADD_FAILURE() << "no psrt process on host " << i;
        return false;
      }
    return true;
  }
};

constexpr auto kPeerTimeout = 3s;
constexpr const char* kSleep = "/usr/bin/sleep";
// The bound on noticing a lost host and stopping the rest: ssh's ServerAlive (3 x 1 s) or the
// scheduler's peer timeout, then the launcher's kill grace (3 s), with room for a loaded machine.
constexpr auto kFaultBound = kPeerTimeout + 3s + 6s;

TEST(SshJobFault, AHostWhoseProcessesAreKilledIsNamedAndNothingIsLeft) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  HeldJob held(hosts, "killed_host.txt");
  ASSERT_TRUE(held.started()) << held.job.out();
  const auto t0 = Clock::now();
  EXPECT_GT(hosts.kill_all(2), 0);
  const int rc = held.job.wait(std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = held.job.out();
  std::printf("psrun ended %.1f s after host 2 was killed:\n", seconds);
  show_verdict(out);
  ASSERT_NE(rc, -1) << "psrun still running " << seconds << " s after host 2 was killed\n" << out;
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker 2@" + hosts.address(2)), std::string::npos) << out;
  EXPECT_NE(out.find("; stopping the job"), std::string::npos) << out;
  EXPECT_GE(wait_no_psrt_process(hosts, 5s), 0) << "a psrt process was left on a host\n" << out;
}

TEST(SshJobFault, AHostWhoseLinkGoesDownIsNamedWithinTheBoundAndNothingIsLeft) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  HeldJob held(hosts, "link_down.txt");
  ASSERT_TRUE(held.started()) << held.job.out();
  const auto t0 = Clock::now();
  hosts.link_down(2);
  const int rc = held.job.wait(std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = held.job.out();
  std::printf("psrun ended %.1f s after host 2's link went down:\n", seconds);
  show_verdict(out);
  ASSERT_NE(rc, -1) << "psrun still running " << seconds << " s after host 2's link went down\n"
                    << out;
  EXPECT_NE(rc, 0) << out;
  // Whichever notices first names worker 2 and its host: the scheduler (no heartbeat for the
  // peer timeout, its verdict) or the launcher (ssh to host 2 gave up after ServerAlive's 3 x 1 s,
  // the same bound). Both take about 3 s, so either may come first.
  const bool by_scheduler = out.find("psrun: the scheduler's verdict: worker 2 (" +
                                     hosts.address(2) + ":") != std::string::npos;
  const bool by_launcher = out.find("worker 2@" + hosts.address(2)) != std::string::npos;
  EXPECT_TRUE(by_scheduler || by_launcher) << out;
  // Host 2, cut off, stops its own processes when psrun's keepalives stop coming.
  const double gone = wait_no_psrt_process(hosts, kFaultBound);
  std::printf("no psrt process on any host %.1f s after psrun ended\n", gone);
  EXPECT_GE(gone, 0) << "a psrt process was left on a host\n" << out;
}

// psrun --max-restarts across hosts: worker 0 (on B) SIGKILLs itself after round 4; psrun stops
// every process on every host and runs the job again on the same hosts from checkpoint round 4,
// which every process is told over ssh, and the second run checks every round exactly.
TEST(SshJobFault, AFailedJobIsRestartedOnItsHostsFromTheLatestCheckpoint) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const std::string b = hosts.address(1), c = hosts.address(2);
  const auto dir = scratch("restart_ckpt");
  ProcessGroup job(
      psrun_on_host0(hosts, "PSRT_PEER_TIMEOUT_MS=3000",
                     "--transport tcp -n 2 -s 2 --lr 1 --partition-bytes 4096 "
                     "--checkpoint-every 2 --max-restarts 1 --checkpoint-dir " +
                         dir.string() + " -H " + b + "," + c + " --server-hosts " + b + "," + c,
                     "resume --rounds 10 --kill-after 4 --sizes 7,5000"),
      scratch("restart.txt"));
  const int rc = job.wait(120s);
  const std::string out = job.out();
  show_verdict(out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "[worker 0@" + b + "] KILLING after round 4"), 1) << out;
  EXPECT_EQ(count(out, "(restart 1 of 1) from the latest complete checkpoint in " + dir.string()),
            1)
      << out;
  for (const auto& host : {b, c})
    EXPECT_EQ(count(out, "@" + host + "] RESUMED 4 (PSRT_RESUME_ROUND 4, PSRT_RESTART_COUNT 1)"), 1)
        << host << "\n"
        << out;
  EXPECT_EQ(count(out, "PASS resume"), 2) << out;
  EXPECT_GE(wait_no_psrt_process(hosts, 5s), 0) << "a psrt process was left on a host\n" << out;
}

// A host lost for good (its link down): before restarting, psrun finds that ssh no longer
// reaches it and moves its worker to the hosts that remain; the restarted job runs its three
// workers on A and B, and nothing is left on any host (C's processes stop when psrun's keepalives
// stop coming).
TEST(SshJobFault, ARestartMovesTheProcessesOfALostHostToTheOthers) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const std::string a = hosts.address(0), b = hosts.address(1), c = hosts.address(2);
  const auto stop = scratch("lost_host_stop");
  ProcessGroup job(
      psrun_on_host0(hosts, std::string("PSRT_PEER_TIMEOUT_MS=3000 PSRT_SECRET=") + kJobSecret,
                     "--transport tcp -n 3 -s 2 --aggregate sum --lr 1 --max-restarts 1 -H " + a +
                         "," + b + "," + c + " --server-hosts " + a + "," + b,
                     "hold --stop-file " + stop.string()),
      scratch("lost_host.txt"));
  ASSERT_TRUE(wait_output(job, "HOLDING rank", 3, 60s)) << job.out();
  hosts.link_down(2);
  ASSERT_TRUE(wait_output(job, "psrun: host " + c + " does not answer ssh", 1,
                          std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound * 2)))
      << job.out();
  ASSERT_TRUE(wait_output(job, "HOLDING rank", 6, 60s)) << job.out();
  std::ofstream(stop) << "1\n";
  const int rc = job.wait(60s);
  const std::string out = job.out();
  show_verdict(out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "(restart 1 of 1) from the start (no --checkpoint-dir)"), 1) << out;
  EXPECT_EQ(count(out, "[worker 2@" + a + "] HOLDING rank 2"), 1) << out;
  EXPECT_EQ(count(out, "PASS hold"), 3) << out;
  EXPECT_GE(wait_no_psrt_process(
                hosts, std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound)),
            0)
      << "a psrt process was left on a host\n"
      << out;
}

// psrun --min-workers across hosts: servers on A, workers 0..2 on B, C, D, checkpoints every 2
// rounds. Once round 6's checkpoint is being written (round 4's is complete then: round 6 needs
// every worker's gradient sent after its pulls of round 5, and a round's pulls are answered only
// once its checkpoint slices are on disk), D's link goes down; the restart finds D
// gone and, with --min-workers 2, goes on with the workers of B and C (ranks 0 and 1) from the
// latest complete checkpoint: the rounds before it are the mean over 3 workers, the rounds after
// it the mean over 2, checked exactly on every element of every round. With --min-workers 3 the
// restart is refused, naming the counts.
struct MinWorkersJob {
  Hosts hosts{4, {.sshd = true}};
  std::filesystem::path dir = scratch("min_workers_ckpt");
  std::string b = hosts.address(1), c = hosts.address(2), d = hosts.address(3);
  std::string out;
  int rc = -1;

  void run(int min_workers, const std::string& log_name) {
    ProcessGroup job(
        psrun_on_host0(hosts, "PSRT_PEER_TIMEOUT_MS=3000",
                       "--transport tcp -n 3 -s 2 --lr 1 --partition-bytes 4096 "
                       "--checkpoint-every 2 --max-restarts 1 --min-workers " +
                           std::to_string(min_workers) + " --checkpoint-dir " + dir.string() +
                           " -H " + b + "," + c + "," + d + " --server-hosts " + hosts.address(0),
                       "resume --rounds 40 --pace-ms 100 --workers-before 3 --sizes 7,5000"),
        scratch(log_name));
    const auto round6 = dir / "r000000000006";  // ps/checkpoint.cc round_dir
    const auto end = Clock::now() + 60s;
    while (!std::filesystem::exists(round6) && Clock::now() < end)
      std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(std::filesystem::exists(round6)) << job.out();
    hosts.link_down(3);
    rc = job.wait(120s);
    out = job.out();
    show_verdict(out);
  }
};

TEST(SshJobFault, MinWorkersRestartsOnTheHostsThatRemainWithFewerWorkers) {
  SKIP_WITHOUT_HOSTS();
  MinWorkersJob m;
  m.run(2, "min_workers.txt");
  ASSERT_EQ(m.rc, 0) << m.out;
  EXPECT_EQ(count(m.out, "psrun: host " + m.d + " does not answer ssh"), 1) << m.out;
  EXPECT_EQ(count(m.out, "psrun: the restart runs 2 workers, not 3 (--min-workers 2)"), 1) << m.out;
  // Both remaining workers resume from the same round, a complete checkpoint at or after 4.
  int resumed = -1;
  for (const auto& [rank, host] : {std::pair{0, m.b}, std::pair{1, m.c}}) {
    const std::string prefix = "[worker " + std::to_string(rank) + "@" + host + "] RESUMED ";
    const auto at = m.out.find(prefix);
    ASSERT_NE(at, std::string::npos) << prefix << "\n" << m.out;
    const int round = std::stoi(m.out.substr(at + prefix.size()));
    if (resumed < 0) resumed = round;
    EXPECT_EQ(round, resumed) << m.out;
    EXPECT_EQ(count(m.out, prefix + std::to_string(round) + " (PSRT_RESUME_ROUND " +
                               std::to_string(round) + ", PSRT_RESTART_COUNT 1)"),
              1)
        << m.out;
  }
  EXPECT_GE(resumed, 4) << m.out;
  EXPECT_EQ(resumed % 2, 0) << m.out;
  EXPECT_EQ(count(m.out, "[worker 2@"), count(m.out, "[worker 2@" + m.d)) << m.out;
  EXPECT_EQ(count(m.out, "PASS resume"), 2) << m.out;
  EXPECT_GE(wait_no_psrt_process(
                m.hosts, std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound)),
            0)
      << "a psrt process was left on a host\n"
      << m.out;
}

TEST(SshJobFault, MinWorkersRefusesARestartWithFewerWorkersThanItNames) {
  SKIP_WITHOUT_HOSTS();
  MinWorkersJob m;
  m.run(3, "min_workers_refused.txt");
  EXPECT_NE(m.rc, 0) << m.out;
  EXPECT_EQ(count(m.out,
                  "psrun: 2 of the job's 3 workers run on hosts that still answer, fewer "
                  "than --min-workers 3; not restarting"),
            1)
      << m.out;
  EXPECT_EQ(count(m.out, "PSRT_RESTART_COUNT 1"), 0) << m.out;
  EXPECT_GE(wait_no_psrt_process(
                m.hosts, std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound)),
            0)
      << "a psrt process was left on a host\n"
      << m.out;
}

// Workers that never exit by themselves (sleep): only the remote side can stop them.
std::string sleeping_job(const Hosts& hosts) {
  return "exec " + hosts.exec_prefix(0) +
         " env PSRT_PEER_TIMEOUT_MS=3000 " PSRUN_PATH " --launcher ssh --ssh-args '" +
         hosts.ssh_args_string() + "' --transport tcp -n 2 -s 1 -H " + hosts.address(1) + "," +
         hosts.address(2) + " -- " + kSleep + " 300";
}

bool sleeping_on_hosts_1_and_2(const Hosts& hosts) {
  for (int i = 0; i < 500; ++i, std::this_thread::sleep_for(20ms))
    if (!pids_running(hosts, 1, {kSleep}).empty() && !pids_running(hosts, 2, {kSleep}).empty())
      return true;
  return false;
}

// psrun --replicas 2 across hosts: servers 0 and 1 on hosts B and C (each one's backup on the
// other host), 3 workers with the scheduler on A, exact rounds. Host C is lost mid-job (every
// process killed, or its link down: noticed after the peer timeout); server 0 takes over server
// 1's slices from their copies and the job finishes with exact weights, psrun naming the lost
// server without failing the job, nothing left on any host.
class SshReplica : public ::testing::TestWithParam<std::string> {};

TEST_P(SshReplica, ALostServerHostCostsNoUpdate) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const std::string a = hosts.address(0), b = hosts.address(1), c = hosts.address(2);
  ProcessGroup job(
      psrun_on_host0(hosts, "PSRT_PEER_TIMEOUT_MS=3000",
                     "--transport tcp -n 3 -s 2 --replicas 2 --lr 1 --partition-bytes 4096 -H " +
                         a + ":3 --server-hosts " + b + "," + c,
                     "exact --rounds 60 --sizes 1,7,1000,4099 --pace-ms 50"),
      scratch("replica_" + GetParam() + ".txt"));
  ASSERT_TRUE(wait_output(job, "replicating to server", 2, 60s)) << job.out();
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(count(job.out(), "PASS exact"), 0) << "the job ended before the loss\n" << job.out();
  if (GetParam() == "kill")
    EXPECT_GT(hosts.kill_all(2), 0);
  else
    hosts.link_down(2);
  const int rc = job.wait(60s);
  const std::string out = job.out();
  show_verdict(out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "PASS exact"), 3) << out;
  EXPECT_EQ(count(out, "[scheduler] server 1 lost"), 1) << out;
  EXPECT_EQ(count(out, "server 0 takes over its slices"), 1) << out;
  EXPECT_EQ(count(out, "psrun: server 1@" + c), 1) << out;
  EXPECT_EQ(count(out, "ended; the job goes on without it"), 1) << out;
  EXPECT_GE(wait_no_psrt_process(hosts, kFaultBound), 0) << "a psrt process was left on a host\n"
                                                         << out;
}

INSTANTIATE_TEST_SUITE_P(Losses, SshReplica, ::testing::Values("kill", "link_down"));

TEST(SshJobFault, KilledPsrunLeavesNoProcessOnAnyHost) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  ProcessGroup job(sleeping_job(hosts), scratch("killed_psrun.txt"));
  ASSERT_TRUE(sleeping_on_hosts_1_and_2(hosts)) << job.out();
  ASSERT_EQ(::kill(job.pid(), SIGKILL), 0);
  job.wait(5s);
  const double gone = wait_none_running(hosts, {kSleep, PSRUN_PATH}, kFaultBound);
  std::printf("no worker or server on any host %.1f s after psrun was SIGKILLed\n", gone);
  EXPECT_GE(gone, 0) << "processes left on a host after psrun was SIGKILLed\n" << job.out();
}

TEST(SshJobFault, ACutOffHostStopsItsProcessesWhenKeepalivesStop) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  ProcessGroup job(sleeping_job(hosts), scratch("cut_off.txt"));
  ASSERT_TRUE(sleeping_on_hosts_1_and_2(hosts)) << job.out();
  const auto t0 = Clock::now();
  hosts.link_down(2);
  // Host 2 hears nothing from psrun any more: its remote side kills `sleep` at the latest after
  // the keepalive timeout (PSRT_PEER_TIMEOUT_MS), although no packet can say so (sometimes
  // sooner: sshd there may fail a write to the dead link and close the session, stdin's EOF).
  bool gone = false;
  while (!gone && Clock::now() - t0 < kFaultBound) {
    gone = pids_running(hosts, 2, {kSleep}).empty();
    std::this_thread::sleep_for(20ms);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("host 2's worker stopped %.1f s after its link went down\n", seconds);
  EXPECT_TRUE(gone) << job.out();
  EXPECT_NE(job.wait(std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound)), 0)
      << job.out();
  EXPECT_GE(wait_none_running(hosts, {kSleep, PSRUN_PATH}, kFaultBound), 0) << job.out();
}

TEST(SshJobFault, SigintReachesEveryRemoteCommandAndNothingIsLeft) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  ProcessGroup job(sleeping_job(hosts), scratch("sigint.txt"));
  ASSERT_TRUE(sleeping_on_hosts_1_and_2(hosts)) << job.out();
  ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
  const int rc = job.wait(std::chrono::duration_cast<std::chrono::milliseconds>(kFaultBound));
  const std::string out = job.out();
  show_verdict(out);
  EXPECT_EQ(rc, 128 + SIGINT) << out;
  EXPECT_NE(out.find("psrun: got SIGINT; forwarding it to every process"), std::string::npos)
      << out;
  // Each remote side passed the signal on: the workers' sleep died of SIGINT on its host.
  for (int i : {1, 2})
    EXPECT_NE(
        out.find("[worker " + std::to_string(i - 1) + "@" + hosts.address(i) + "] psrt remote"),
        std::string::npos)
        << out;
  EXPECT_GE(count(out, "the command was killed by signal 2 (SIGINT)"), 2) << out;
  EXPECT_EQ(out.find("scheduler's verdict"), std::string::npos) << "psrun's own stop" << out;
  EXPECT_GE(wait_none_running(hosts, {kSleep, PSRUN_PATH}, 5s), 0) << out;
}

TEST(SshJobFault, AnUnreachableHostIsNamedWithSshsStatus) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = true});
  const std::string nobody = "10.9.0.99";  // in the hosts' network, but no host answers there
  ProcessGroup job("exec " + hosts.exec_prefix(0) + " " PSRUN_PATH " --launcher ssh --ssh-args '" +
                       hosts.ssh_args_string() + " -o ConnectTimeout=2' --transport tcp -n 2 -H " +
                       hosts.address(1) + "," + nobody + " -- " + kSleep + " 300",
                   scratch("unreachable.txt"));
  const int rc = job.wait(30s);
  const std::string out = job.out();
  show_verdict(out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("psrun: worker 1@" + nobody + " (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("exited with status 255 (ssh's own status: it could not reach " + nobody),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("scheduler's verdict"), std::string::npos) << "psrun's own stop" << out;
  EXPECT_GE(wait_none_running(hosts, {kSleep, PSRUN_PATH}, 5s), 0) << out;
}

// `psrun --launcher ssh -- ./prog data.txt` from a directory the hosts share: the remote command
// runs in psrun's working directory, so the program and its relative arguments are found there
// (before, they were looked up in the remote login directory).
TEST(SshJobPaths, ARelativeProgramRunsInPsrunsWorkingDirectory) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = true});
  const auto dir = scratch("cwd");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "show_cwd.sh") << "#!/bin/sh\necho \"cwd=$(pwd) data=$(cat \"$1\")\"\n";
  std::filesystem::permissions(dir / "show_cwd.sh", std::filesystem::perms::owner_all);
  std::ofstream(dir / "data.txt") << "relative-data\n";
  ProcessGroup job("cd " + dir.string() + " && exec " + hosts.exec_prefix(0) +
                       " " PSRUN_PATH " --launcher ssh --ssh-args '" + hosts.ssh_args_string() +
                       "' --transport tcp -n 1 -H " + hosts.address(1) +
                       " -- ./show_cwd.sh data.txt",
                   scratch("relative.txt"));
  const int rc = job.wait(60s);
  const std::string out = job.out();
  show_verdict(out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "[worker 0@" + hosts.address(1) + "] cwd=" + dir.string() +
                           " data=relative-data\n"),
            1)
      << out;
}

TEST(SshJobSecurity, AWorkerWithAWrongSecretFromAnotherHostIsRefusedAndTheJobStaysExact) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  HeldJob held(hosts, "wrong_secret.txt");
  ASSERT_TRUE(held.started()) << held.job.out();
  const std::string out = held.job.out();
  const auto at = out.find("scheduler at ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string scheduler = out.substr(at + 13, out.find_first_of(" \n", at + 13) - at - 13);
  const auto intruder =
      hosts.run_in(2,
                   {"env", "PSRT_SCHEDULER=" + scheduler, "PSRT_TRANSPORT=tcp",
                    "PSRT_SECRET=not-the-job-secret-but-long-enough-0123456789",
                    "PSRT_NUM_WORKERS=3", "PSRT_CONNECT_TIMEOUT_MS=5000", "PSRT_OP_TIMEOUT_MS=5000",
                    PS_WORKER_PATH, "exact", "--rounds", "1", "--sizes", "7"},
                   30s);
  EXPECT_NE(intruder.rc, 0) << intruder.out;
  EXPECT_EQ(count(intruder.out, "PASS"), 0) << intruder.out;
  // The job secret (psrun's, from its environment) is on no process's command line.
  const std::string secret = kJobSecret;
  int scanned = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string cmdline = slurp(e.path() / "cmdline");
    scanned += cmdline.empty() ? 0 : 1;
    EXPECT_EQ(cmdline.find(secret), std::string::npos) << e.path() << ": " << cmdline;
  }
  EXPECT_GT(scanned, 10);
  std::ofstream(held.stop) << "stop";
  const int rc = held.job.wait(60s);
  EXPECT_EQ(rc, 0) << held.job.out();
  EXPECT_EQ(count(held.job.out(), "PASS hold"), 3) << held.job.out();
  std::printf("the intruder on host 2 (exit %d):\n%s\n", intruder.rc, intruder.out.c_str());
}

}  // namespace
}  // namespace psrt::test
