// Identity on every message, tested as an attacker would (label security): a process that never
// learns the job secret injects PUSH, SHUTDOWN and UNREGISTER into a running psrun job, over raw
// UCX with forged route ids and over raw TCP sockets (ps_spoofer), while the job's workers check
// every round exactly (ps_worker victim); and a process holding the secret tries to act as
// another rank and outside its role (ps_worker attack, attacker.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "transport/factory.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("psrt_identity_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto p = dir / name;
  fs::remove_all(p);
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// `sh -c CMD` in its own process group, so that the whole job can be killed on a failure.
class Background {
 public:
  explicit Background(const std::string& cmd) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && rc_ < 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code, or -1 (and the job killed) when it did not end within `limit`.
  int wait(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return rc_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int rc_ = -1;
};

// Waits up to 20 s for `pred`.
template <class F>
bool eventually(F pred) {
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string find_address(const std::string& log, const std::string& before) {
  std::smatch m;
  if (std::regex_search(log, m, std::regex(before + " (127\\.0\\.0\\.1:[0-9]+)"))) return m[1];
  return {};
}

class Spoofing : public ::testing::TestWithParam<std::string> {};

// Two workers, one server. Once both workers have initialised key 0 and passed a barrier (every
// connection is up), ps_spoofer, which has no secret, sends a poisoned PUSH and a SHUTDOWN to the
// server and an UNREGISTER to the scheduler: over UCX for every connection id with a guessed
// route token, then on its own bootstrapped connection; over TCP on raw sockets. Then the
// workers run five sum-mode rounds and check each exactly, and a final barrier that a removed
// worker would fail. Before route tokens, the UCX run lost a server or a worker, or had wrong
// weights.
TEST_P(Spoofing, UnauthenticatedInjectionIsDroppedAndTheJobStaysExact) {
  const std::string backend = GetParam();
  const auto sync = scratch("sync_" + backend);
  const auto log = scratch("job_" + backend + ".txt");
  Background job(std::string(PSRUN_PATH) + " --transport " + backend +
                 " -n 2 -s 1 --aggregate sum --lr 1 -- " + PS_WORKER_PATH +
                 " victim --rounds 5 --stop-file " + sync.string() + " > " + log.string() +
                 " 2>&1");
  ASSERT_TRUE(eventually([&] {
    return fs::exists(sync.string() + ".ready0") && fs::exists(sync.string() + ".ready1");
  })) << slurp(log);
  const std::string out = slurp(log);
  const std::string scheduler = find_address(out, "scheduler at");
  const std::string server = find_address(out, "listening on");
  ASSERT_FALSE(scheduler.empty()) << out;
  ASSERT_FALSE(server.empty()) << out;

  const auto spoof_log = scratch("spoof_" + backend + ".txt");
  const std::string spoof = std::string(PS_SPOOFER_PATH) + " " + backend + " " + scheduler + " " +
                            server + " 4099 > " + spoof_log.string() + " 2>&1";
  Background spoofer(spoof);
  EXPECT_EQ(spoofer.wait(std::chrono::seconds(30)), 0) << slurp(spoof_log);
  { std::ofstream(sync.string() + ".go"); }
  const int rc = job.wait(std::chrono::seconds(40));
  const std::string job_out = slurp(log);
  const std::string spoof_out = slurp(spoof_log);

  EXPECT_EQ(rc, 0) << job_out << "\n--- spoofer ---\n" << spoof_out;
  EXPECT_EQ(count(job_out, "PASS victim"), 2) << job_out;
  if (backend == "ucx") {
    // 7 forged ids for each of the three messages, then three on the spoofer's own connection.
    EXPECT_EQ(count(spoof_out, "SENT "), 24) << spoof_out;
    EXPECT_EQ(count(spoof_out, "(our own)"), 3) << spoof_out;
    EXPECT_NE(job_out.find("with a wrong route token"), std::string::npos) << job_out;
  } else {
    EXPECT_EQ(count(spoof_out, "SENT "), 3) << spoof_out;
  }
  // Bootstrapping a transport connection grants nothing: the spoofer's own messages are answered
  // as unauthenticated (the UCX bootstrap hello needs no secret, and nothing in it is acted on).
  EXPECT_GE(count(spoof_out, "before authentication"), 1) << spoof_out;
  EXPECT_EQ(count(job_out, "stopped the job"), 0) << job_out;
  EXPECT_EQ(count(job_out, "left the job"), 2) << "only the workers' own UNREGISTERs\n" << job_out;
}

INSTANTIATE_TEST_SUITE_P(Backends, Spoofing,
                         ::testing::ValuesIn(psrt::transport::available_backends()));

class SecretHolder : public ::testing::TestWithParam<std::string> {};

// Rank 0 holds the secret and registers; it then connects to the server as rank 1 (with its own
// credential and with none) and as rank 7, and pushes 1000s if that is accepted; and it
// authenticates to the scheduler as a server and asks for a LOCATE. All are refused, and ranks
// 1 and 2 check every round exactly. Before credentials the server took the push as rank 1's.
TEST_P(SecretHolder, CannotActAsAnotherRankOrRole) {
  const auto log = scratch("holder.txt");
  const std::string cmd = std::string(PSRUN_PATH) + " --transport " + GetParam() +
                          " -n 3 --aggregate sum --lr 1 -- " + PS_WORKER_PATH +
                          " attack --rounds 5 > " + log.string() + " 2>&1";
  Background job(cmd);
  const int rc = job.wait(std::chrono::seconds(60));
  const std::string out = slurp(log);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "OK connection as worker 1 refused"), 2) << out;
  EXPECT_EQ(count(out, "OK connection as worker 7 refused"), 1) << out;
  EXPECT_EQ(count(out, "OK LOCATE from a server refused"), 1) << out;
  EXPECT_EQ(count(out, "PASS attack"), 3) << out;
}

INSTANTIATE_TEST_SUITE_P(Backends, SecretHolder,
                         ::testing::ValuesIn(psrt::transport::available_backends()));

}  // namespace
