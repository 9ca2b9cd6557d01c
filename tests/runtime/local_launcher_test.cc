// The local launch backend against real processes (/bin/sh): output relaying, environment,
// failure reporting, signal forwarding and the guarantee that nothing is left running.
#include "runtime/launch/local_launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "psrt/error.h"
#include "runtime/launch/factory.h"
#include "runtime/launch/launcher.h"

namespace psrt::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits (bounded) until `path` holds a whole line, and returns the number on it.
pid_t wait_for_pid_file(const fs::path& path, milliseconds timeout = milliseconds{5'000}) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const std::string text = slurp(path);
    if (!text.empty() && text.back() == '\n') return static_cast<pid_t>(std::stol(text));
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << "no pid in " << path << " after " << timeout.count() << " ms";
      return -1;
    }
    std::this_thread::sleep_for(milliseconds{10});
  }
}

// Gone, or a zombie waiting for a parent that is not us (the background process of a child that
// was killed is reparented; whether init reaps it at once depends on the container). A process
// that was sent SIGKILL but not reaped by the launcher (a descendant of a child) may need a moment
// to die, so this waits up to a second.
bool process_gone(pid_t pid) {
  const auto deadline = Clock::now() + milliseconds{1'000};
  for (;;) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') {
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds{10});
  }
}

// True when this test process has no child at all, exited or not.
bool no_children() {
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto& line : lines_of(text)) {
    if (line.starts_with(prefix)) out.push_back(std::move(line));
  }
  return out;
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

class LocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "psrt-launch-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    out_fd_ = ::open((dir_ / "psrun.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    err_fd_ = ::open((dir_ / "psrun.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(out_fd_, 0);
    ASSERT_GE(err_fd_, 0);
    job_.service_grace = milliseconds{5'000};
    job_.kill_grace = milliseconds{5'000};
  }
  void TearDown() override {
    ::close(out_fd_);
    ::close(err_fd_);
    fs::remove_all(dir_);
  }

  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  std::string out() const { return slurp(dir_ / "psrun.out"); }
  std::string err() const { return slurp(dir_ / "psrun.err"); }

  // A shell snippet that waits (at most ~5 s) until each named file is non-empty.
  std::string wait_for_files(const std::vector<std::string>& names) const {
    std::string missing;
    for (const auto& name : names) {
      missing += (missing.empty() ? "" : " || ") + std::string("[ ! -s '") + at(name) + "' ]";
    }
    return "i=0; while [ $i -lt 250 ] && { " + missing + "; }; do sleep 0.02; i=$((i+1)); done; ";
  }
  // A shell snippet that records the shell's pid in `name`.
  std::string record_pid(const std::string& name) const {
    return "echo $$ > '" + at(name) + ".tmp' && mv '" + at(name) + ".tmp' '" + at(name) + "'; ";
  }

  static ProcessSpec sh(std::string label, std::string script,
                        std::vector<std::pair<std::string, std::string>> env = {}) {
    return ProcessSpec{.label = std::move(label),
                       .argv = {"/bin/sh", "-c", std::move(script)},
                       .env = std::move(env)};
  }

  // Runs job_ in this process and returns psrun's status; elapsed_ is set.
  int run_job() {
    LocalLauncher launcher(out_fd_, err_fd_);
    const auto start = Clock::now();
    const int rc = launcher.run(job_);
    elapsed_ = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    return rc;
  }

  fs::path dir_;
  int out_fd_ = -1;
  int err_fd_ = -1;
  JobSpec job_;
  milliseconds elapsed_{0};
};

TEST_F(LocalLauncherTest, PrefixesEveryLineWithItsLabelOnTheSameStream) {
  job_.services.push_back(sh(
      "scheduler", "echo ready; echo service-err >&2; " + wait_for_files({"w0.done", "w1.done"})));
  job_.workers.push_back(
      sh("worker 0",
         R"(printf 'a\nb\n'; printf 'e1\n' >&2; printf 'last'; echo 1 > ')" + at("w0.done") + "'"));
  job_.workers.push_back(
      sh("worker 1", R"(printf 'x\n'; printf 'e2' >&2; echo 1 > ')" + at("w1.done") + "'"));

  EXPECT_EQ(run_job(), 0);
  const std::string o = out();
  const std::string e = err();
  EXPECT_NE(o.find("[scheduler] ready\n"), std::string::npos) << o;
  // Lines of different processes may alternate; each process's own lines keep their order.
  EXPECT_EQ(lines_with_prefix(o, "[worker 0] "),
            (std::vector<std::string>{"[worker 0] a", "[worker 0] b", "[worker 0] last"}))
      << o;
  EXPECT_NE(o.find("[worker 1] x\n"), std::string::npos) << o;
  EXPECT_NE(e.find("[scheduler] service-err\n"), std::string::npos) << e;
  EXPECT_NE(e.find("[worker 0] e1\n"), std::string::npos) << e;
  EXPECT_NE(e.find("[worker 1] e2\n"), std::string::npos) << e;  // no newline at its end
  EXPECT_EQ(lines_of(o).size(), 5U) << o;
  EXPECT_EQ(lines_of(e).size(), 3U) << e;  // no "psrun:" line on success
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, LinesWrittenInPiecesByConcurrentProcessesStayWhole) {
  constexpr int kWorkers = 3;
  constexpr int kLines = 300;
  for (int w = 0; w < kWorkers; ++w) {
    job_.workers.push_back(sh("worker " + std::to_string(w),
                              "i=0; while [ $i -lt " + std::to_string(kLines) +
                                  " ]; do printf 'abc'; printf 'def\\n'; i=$((i+1)); done"));
  }
  EXPECT_EQ(run_job(), 0);
  const auto lines = lines_of(out());
  EXPECT_EQ(lines.size(), static_cast<std::size_t>(kWorkers * kLines));
  const std::regex whole(R"(\[worker [0-2]\] abcdef)");
  for (const auto& line : lines) {
    ASSERT_TRUE(std::regex_match(line, whole)) << line;
  }
}

TEST_F(LocalLauncherTest, EnvironmentIsSetOnTopOfPsrunsOwn) {
  ASSERT_EQ(::setenv("PSRT_LAUNCH_TEST_INHERITED", "from-psrun", 1), 0);
  ASSERT_EQ(::setenv("PSRT_LAUNCH_TEST_OVERRIDDEN", "old", 1), 0);
  const std::string print =
      "echo \"rank=$PSRT_RANK inherited=$PSRT_LAUNCH_TEST_INHERITED "
      "overridden=$PSRT_LAUNCH_TEST_OVERRIDDEN\"";
  job_.workers.push_back(
      sh("worker 0", print, {{"PSRT_RANK", "0"}, {"PSRT_LAUNCH_TEST_OVERRIDDEN", "new"}}));
  job_.workers.push_back(sh("worker 1", print, {{"PSRT_RANK", "1"}}));

  EXPECT_EQ(run_job(), 0);
  ::unsetenv("PSRT_LAUNCH_TEST_INHERITED");
  ::unsetenv("PSRT_LAUNCH_TEST_OVERRIDDEN");
  const std::string o = out();
  EXPECT_NE(o.find("[worker 0] rank=0 inherited=from-psrun overridden=new\n"), std::string::npos)
      << o;
  EXPECT_NE(o.find("[worker 1] rank=1 inherited=from-psrun overridden=old\n"), std::string::npos)
      << o;
}

TEST_F(LocalLauncherTest, ServicesThatExitAfterTheWorkersEndTheJobWithoutWaitingTheGrace) {
  job_.service_grace = milliseconds{5'000};
  job_.services.push_back(sh("scheduler", wait_for_files({"w.done"}) + "sleep 0.1; exit 0"));
  job_.services.push_back(sh("server 0", wait_for_files({"w.done"}) + "exit 0"));
  job_.workers.push_back(sh("worker 0", "echo 1 > '" + at("w.done") + "'; exit 0"));

  EXPECT_EQ(run_job(), 0);
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_EQ(err(), "");
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, OnWorkersDoneRunsOnceAfterTheLastWorkerAndLetsServicesExit) {
  // The callback stands in for psrun's scheduler telling the servers that the job is over.
  int calls = 0;
  job_.on_workers_done = [&] {
    ++calls;
    // Every worker has exited by now.
    EXPECT_TRUE(fs::exists(dir_ / "w0.done") && fs::exists(dir_ / "w1.done"));
    std::ofstream(dir_ / "release") << "1\n";
  };
  job_.services.push_back(sh("server 0", wait_for_files({"release"}) + "exit 0"));
  job_.workers.push_back(sh("worker 0", "echo 1 > '" + at("w0.done") + "'"));
  job_.workers.push_back(sh("worker 1", "sleep 0.2; echo 1 > '" + at("w1.done") + "'"));

  EXPECT_EQ(run_job(), 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(err(), "");
  EXPECT_LT(elapsed_.count(), 3'000);  // the server left on its own, well within service_grace
}

TEST_F(LocalLauncherTest, OnWorkersDoneDoesNotRunWhenAWorkerFails) {
  int calls = 0;
  job_.on_workers_done = [&] { ++calls; };
  job_.workers.push_back(sh("worker 0", "exit 1"));
  job_.workers.push_back(sh("worker 1", "exit 0"));

  EXPECT_EQ(run_job(), 1);
  EXPECT_EQ(calls, 0);
}

// --on-worker-loss continue: a failed worker is reported and the others go on; the job ends 0
// once they exit 0, and the services are told as usual.
TEST_F(LocalLauncherTest, WorkersMayFailLetsTheOthersFinish) {
  int calls = 0;
  job_.on_workers_done = [&] {
    ++calls;
    std::ofstream(dir_ / "release") << "1\n";
  };
  job_.services.push_back(sh("server 0", wait_for_files({"release"}) + "exit 0"));
  job_.workers.push_back(sh("worker 0", record_pid("w0.pid") + "kill -9 $$"));
  job_.workers.push_back(
      sh("worker 1", wait_for_files({"w0.pid"}) + "sleep 0.3; echo 1 > '" + at("w1.done") + "'"));

  for (auto& w : job_.workers)
    w.may_fail = true;
  EXPECT_EQ(run_job(), 0);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(fs::exists(dir_ / "w1.done"));
  const pid_t w0 = wait_for_pid_file(dir_ / "w0.pid");
  EXPECT_EQ(err(), "psrun: worker 0 (pid " + std::to_string(w0) +
                       ") was killed by signal 9 (SIGKILL); the job goes on without it "
                       "(--on-worker-loss continue)\n");
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, WorkersMayFailStillFailsTheJobWhenEveryWorkerFailed) {
  int calls = 0;
  job_.on_workers_done = [&] { ++calls; };
  job_.services.push_back(sh("server 0", "exec sleep 30"));
  job_.workers.push_back(sh("worker 0", record_pid("w0.pid") + "exit 3"));
  job_.workers.push_back(sh("worker 1", wait_for_files({"w0.pid"}) + "sleep 0.2; exit 4"));

  for (auto& w : job_.workers)
    w.may_fail = true;
  EXPECT_EQ(run_job(), 1);
  EXPECT_EQ(calls, 0);
  const std::string e = err();
  EXPECT_EQ(count_of(e, "exited with status 3; the job goes on without it"), 1) << e;
  EXPECT_EQ(count_of(e, "exited with status 4; stopping the job\n"), 1) << e;
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, WorkerKilledBySignalStopsEveryProcessWithinKillGrace) {
  job_.kill_grace = milliseconds{700};
  job_.services.push_back(sh("scheduler", record_pid("scheduler.pid") + "exec sleep 30"));
  // Ignores SIGTERM, and so does its background child: only SIGKILL to the group ends them.
  job_.workers.push_back(sh("worker 0", "trap '' TERM; sleep 30 & echo $! > '" + at("w0child.pid") +
                                            "'; " + record_pid("w0.pid") +
                                            "while :; do sleep 0.05; done"));
  job_.workers.push_back(sh("worker 1", wait_for_files({"scheduler.pid", "w0.pid", "w0child.pid"}) +
                                            record_pid("w1.pid") + "kill -9 $$"));

  EXPECT_EQ(run_job(), 1);
  const pid_t scheduler = wait_for_pid_file(dir_ / "scheduler.pid");
  const pid_t w0 = wait_for_pid_file(dir_ / "w0.pid");
  const pid_t w0_child = wait_for_pid_file(dir_ / "w0child.pid");
  const pid_t w1 = wait_for_pid_file(dir_ / "w1.pid");
  const std::string e = err();
  EXPECT_NE(e.find("psrun: worker 1 (pid " + std::to_string(w1) +
                   ") was killed by signal 9 (SIGKILL); stopping the job\n"),
            std::string::npos)
      << e;
  EXPECT_EQ(count_of(e, "stopping the job"), 1) << e;
  // SIGTERM was ignored, so the end came from SIGKILL after kill_grace, and not much later.
  EXPECT_GE(elapsed_.count(), job_.kill_grace.count());
  EXPECT_LT(elapsed_.count(), job_.kill_grace.count() + 3'000);
  for (const pid_t pid : {scheduler, w0, w0_child, w1}) {
    EXPECT_TRUE(process_gone(pid)) << pid;
  }
  EXPECT_TRUE(no_children());
}

// A worker that dies of a signal psrun did not send while psrun stops the job is named with that
// signal: in a real job the process killed first is often seen last (its peers see its
// connections close and fail before it has finished dying), and this line is then the only one
// that says how it died. Here worker 1 kills itself when psrun's SIGTERM arrives.
TEST_F(LocalLauncherTest, AWorkerKilledByAnotherSignalWhileStoppingIsNamed) {
  job_.workers.push_back(
      sh("worker 0", wait_for_files({"w1.pid"}) + record_pid("w0.pid") + "exit 1"));
  job_.workers.push_back(sh("worker 1", "trap 'kill -9 $$' TERM; " + record_pid("w1.pid") +
                                            "while :; do sleep 0.05; done"));

  EXPECT_EQ(run_job(), 1);
  const pid_t w0 = wait_for_pid_file(dir_ / "w0.pid");
  const pid_t w1 = wait_for_pid_file(dir_ / "w1.pid");
  const std::string e = err();
  EXPECT_EQ(count_of(e, "psrun: worker 0 (pid " + std::to_string(w0) +
                            ") exited with status 1; stopping the job\n"),
            1)
      << e;
  EXPECT_EQ(count_of(e, "psrun: worker 1 (pid " + std::to_string(w1) +
                            ") was killed by signal 9 (SIGKILL) (seen while stopping the job)\n"),
            1)
      << e;
  EXPECT_EQ(count_of(e, "stopping the job;"), 0) << e;
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, WorkerExitStatusIsReportedAndSigtermStopsTheRest) {
  job_.kill_grace = milliseconds{5'000};
  job_.workers.push_back(
      sh("worker 0", wait_for_files({"w1.pid"}) + record_pid("w0.pid") + "exit 3"));
  job_.workers.push_back(sh("worker 1", record_pid("w1.pid") + "exec sleep 30"));

  EXPECT_EQ(run_job(), 1);
  const pid_t w0 = wait_for_pid_file(dir_ / "w0.pid");
  const pid_t w1 = wait_for_pid_file(dir_ / "w1.pid");
  EXPECT_EQ(err(), "psrun: worker 0 (pid " + std::to_string(w0) +
                       ") exited with status 3; stopping the job\n");
  // sleep dies of SIGTERM: no waiting for kill_grace.
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(process_gone(w1));
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, ServiceExitingWhileWorkersRunFailsTheJobEvenWithStatusZero) {
  job_.service_grace = milliseconds{300};
  job_.services.push_back(sh("scheduler", record_pid("scheduler.pid") + "exit 0"));
  job_.workers.push_back(sh("worker 0", "exec sleep 30"));

  EXPECT_EQ(run_job(), 1);
  const pid_t scheduler = wait_for_pid_file(dir_ / "scheduler.pid");
  EXPECT_EQ(err(), "psrun: scheduler (pid " + std::to_string(scheduler) +
                       ") exited with status 0; stopping the job\n");
  // The workers had service_grace to finish after the scheduler left.
  EXPECT_GE(elapsed_.count(), 300);
  EXPECT_LT(elapsed_.count(), 300 + 3'000);
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, ServiceExitingShortlyBeforeTheLastWorkerIsNotAFailure) {
  // The scheduler ends the final barrier and exits; the worker takes a moment to tear down.
  job_.service_grace = milliseconds{5'000};
  job_.services.push_back(sh("scheduler", "exit 0"));
  job_.workers.push_back(sh("worker 0", "sleep 0.3; exit 0"));

  EXPECT_EQ(run_job(), 0);
  EXPECT_EQ(err(), "");
  EXPECT_LT(elapsed_.count(), 3'000);
}

TEST_F(LocalLauncherTest, ServiceExitingNonZeroWhileWorkersRunFailsAtOnce) {
  job_.service_grace = milliseconds{5'000};
  job_.services.push_back(sh("server 0", record_pid("server.pid") + "exit 2"));
  job_.workers.push_back(sh("worker 0", "exec sleep 30"));

  EXPECT_EQ(run_job(), 1);
  const pid_t server = wait_for_pid_file(dir_ / "server.pid");
  EXPECT_EQ(err(), "psrun: server 0 (pid " + std::to_string(server) +
                       ") exited with status 2; stopping the job\n");
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(no_children());
}

// A server of a job with replicas (ProcessSpec::may_fail): its end is reported, the job goes on.
TEST_F(LocalLauncherTest, AServiceThatMayFailEndsWithoutStoppingTheJob) {
  auto server = sh("server 0", record_pid("server.pid") + "kill -9 $$");
  server.may_fail = true;
  job_.services.push_back(server);
  job_.workers.push_back(sh("worker 0", wait_for_files({"server.pid"}) + "sleep 0.3; exit 0"));

  EXPECT_EQ(run_job(), 0);
  const pid_t pid = wait_for_pid_file(dir_ / "server.pid");
  EXPECT_EQ(err(), "psrun: server 0 (pid " + std::to_string(pid) +
                       ") ended; the job goes on without it\n");
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, CommandNotFoundIsReportedAndStopsWhatStarted) {
  job_.services.push_back(sh("scheduler", "exec sleep 30"));
  job_.workers.push_back(
      {.label = "worker 0", .argv = {"psrt-launch-test-no-such-command", "--flag"}});

  EXPECT_EQ(run_job(), 1);
  EXPECT_EQ(err(),
            "psrun: worker 0: cannot run 'psrt-launch-test-no-such-command': No such file or "
            "directory\n");
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(no_children());  // the scheduler was stopped and reaped
}

TEST_F(LocalLauncherTest, CommandThatIsNotExecutableIsReported) {
  const std::string script = at("not-executable.sh");
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  ::chmod(script.c_str(), 0600);
  job_.workers.push_back({.label = "worker 0", .argv = {script}});

  EXPECT_EQ(run_job(), 1);
  EXPECT_EQ(err(), "psrun: worker 0: cannot run '" + script + "': Permission denied\n");
  EXPECT_EQ(out(), "");
}

TEST_F(LocalLauncherTest, ServicesStillRunningAfterServiceGraceAreStoppedAndTheJobSucceeds) {
  job_.service_grace = milliseconds{300};
  job_.kill_grace = milliseconds{2'000};
  job_.services.push_back(sh("scheduler", record_pid("scheduler.pid") + "exec sleep 30"));
  job_.services.push_back(sh("server 0", record_pid("server.pid") + "exec sleep 30"));
  job_.workers.push_back(
      sh("worker 0", wait_for_files({"scheduler.pid", "server.pid"}) + "exit 0"));

  EXPECT_EQ(run_job(), 0);
  const pid_t scheduler = wait_for_pid_file(dir_ / "scheduler.pid");
  const pid_t server = wait_for_pid_file(dir_ / "server.pid");
  EXPECT_EQ(err(), "psrun: warning: scheduler (pid " + std::to_string(scheduler) +
                       "), server 0 (pid " + std::to_string(server) +
                       ") still running 300 ms after the last worker exited; stopping them\n");
  EXPECT_GE(elapsed_.count(), 300);
  EXPECT_LT(elapsed_.count(), 300 + 3'000);  // SIGTERM ends sleep: kill_grace not used up
  EXPECT_TRUE(process_gone(scheduler));
  EXPECT_TRUE(process_gone(server));
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, BackgroundProcessHoldingThePipeDoesNotHoldUpTheEnd) {
  job_.workers.push_back(
      sh("worker 0", "sleep 30 & echo $! > '" + at("bg.pid") + "'; echo done; exit 0"));

  EXPECT_EQ(run_job(), 0);
  EXPECT_EQ(out(), "[worker 0] done\n");
  EXPECT_LT(elapsed_.count(), 3'000);
  EXPECT_TRUE(process_gone(wait_for_pid_file(dir_ / "bg.pid")));  // its group got SIGKILL
  EXPECT_TRUE(no_children());
}

TEST_F(LocalLauncherTest, EmptyCommandIsRejectedBeforeAnythingStarts) {
  job_.services.push_back(sh("scheduler", "echo started"));
  job_.workers.push_back({.label = "worker 0"});
  try {
    run_job();
    FAIL() << "expected psrt::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("worker 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(out(), "");
  EXPECT_TRUE(no_children());
}

TEST(LaunchBackendFactory, MakesEveryBackendAndNamesThemForUnknownNames) {
  LaunchOptions dry;
  dry.dry_run = true;  // slurm outside an allocation: only a dry run
  for (const char* name : {"local", "ssh", "mpi", "slurm"})
    EXPECT_EQ(make_launch_backend(name, dry)->name(), name);
  try {
    make_launch_backend("slurm-typo");
    FAIL() << "expected psrt::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "unknown launch backend 'slurm-typo'; known backends: local, ssh, mpi, slurm");
  }
}

// psrun itself gets a signal: the launcher runs in a forked copy of this test so that the signal
// can be sent to it from outside.
struct ForwardCase {
  int sig;
  const char* trap_name;
};
void PrintTo(const ForwardCase& c, std::ostream* os) {
  *os << "SIG" << c.trap_name;
}

class SignalForwardingTest : public LocalLauncherTest,
                             public ::testing::WithParamInterface<ForwardCase> {
 protected:
  // Forks; the child runs job_ and exits with run()'s result.
  pid_t start_launcher() {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 99;
      try {
        rc = LocalLauncher(out_fd_, err_fd_).run(job_);
      } catch (...) {
      }
      ::_exit(rc);
    }
    return pid;
  }

  // Waits (bounded) for `pid` to exit; SIGKILLs it on timeout. Returns the wait status.
  static int wait_exit(pid_t pid, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "launcher did not exit within " << timeout.count() << " ms";
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds{10});
    }
    return status;
  }
};

TEST_P(SignalForwardingTest, SignalIsForwardedToEveryProcessAndTheJobEndsWith128PlusIt) {
  const ForwardCase c = GetParam();
  const std::vector<std::string> names = {"scheduler", "w0", "w1"};
  const auto script = [&](const std::string& name) {
    return "trap 'echo $$ > \"" + at(name + ".got") + "\"; exit 0' " + c.trap_name + "; " +
           record_pid(name + ".pid") + "while :; do sleep 0.05; done";
  };
  job_.kill_grace = milliseconds{5'000};
  job_.services.push_back(sh("scheduler", script("scheduler")));
  job_.workers.push_back(sh("worker 0", script("w0")));
  job_.workers.push_back(sh("worker 1", script("w1")));

  const pid_t launcher = start_launcher();
  ASSERT_GT(launcher, 0);
  std::vector<pid_t> pids;
  pids.reserve(names.size());
  for (const auto& name : names) {
    pids.push_back(wait_for_pid_file(dir_ / (name + ".pid")));
  }
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(launcher, c.sig), 0);
  const int status = wait_exit(launcher, milliseconds{10'000});
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - sent);

  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + c.sig);
  EXPECT_LT(took.count(), 3'000);  // they exited on the forwarded signal, not on SIGKILL
  for (std::size_t i = 0; i < names.size(); ++i) {
    // The trap ran in the process itself: the signal reached each one.
    EXPECT_EQ(slurp(dir_ / (names[i] + ".got")), std::to_string(pids[i]) + "\n") << names[i];
    EXPECT_TRUE(process_gone(pids[i]));
  }
  // Only psrun's own line: the shells may add "[worker 0] Terminated" for their killed sleep.
  EXPECT_EQ(lines_with_prefix(err(), "psrun:"),
            std::vector<std::string>{"psrun: got SIG" + std::string(c.trap_name) +
                                     "; forwarding it to every process"});
  EXPECT_TRUE(no_children());
}

INSTANTIATE_TEST_SUITE_P(IntAndTerm, SignalForwardingTest,
                         ::testing::Values(ForwardCase{SIGTERM, "TERM"},
                                           ForwardCase{SIGINT, "INT"}),
                         [](const auto& info) { return std::string(info.param.trap_name); });

TEST_F(SignalForwardingTest, SecondSignalWhileStoppingKillsAtOnce) {
  job_.kill_grace = milliseconds{20'000};
  job_.workers.push_back(
      sh("worker 0", "trap '' TERM; " + record_pid("w0.pid") + "while :; do sleep 0.05; done"));

  const pid_t launcher = start_launcher();
  ASSERT_GT(launcher, 0);
  const pid_t w0 = wait_for_pid_file(dir_ / "w0.pid");
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  std::this_thread::sleep_for(milliseconds{200});
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  const int status = wait_exit(launcher, milliseconds{10'000});
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - sent);

  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_LT(took.count(), 3'000);  // far below kill_grace
  EXPECT_TRUE(process_gone(w0));
  EXPECT_EQ(err(),
            "psrun: got SIGTERM; forwarding it to every process\n"
            "psrun: got SIGTERM again; killing every process\n");
}

// A relay process (the ssh backend's): its stdin gets stdin_data at start, then a keepalive line
// every second while it runs.
TEST_F(LocalLauncherTest, RelayProcessGetsItsStdinDataThenKeepalives) {
  ProcessSpec relay =
      sh("relay", R"(read first; echo "first:$first"; read k; echo "keepalive:[$k]")");
  relay.stdin_data = "hello\n";
  relay.relay = true;
  job_.workers.push_back(relay);
  EXPECT_EQ(run_job(), 0) << err();
  EXPECT_EQ(count_of(out(), "[relay] first:hello\n"), 1) << out();
  EXPECT_EQ(count_of(out(), "[relay] keepalive:[]\n"), 1) << out();
}

// A plain process keeps /dev/null as stdin; a relay without stdin data is refused up front.
TEST_F(LocalLauncherTest, PlainProcessesReadNothingAndARelayNeedsStdinData) {
  job_.workers.push_back(sh("plain", "if read x; then echo \"read:$x\"; else echo eof; fi"));
  EXPECT_EQ(run_job(), 0) << err();
  EXPECT_EQ(count_of(out(), "[plain] eof\n"), 1) << out();
  JobSpec bad;
  ProcessSpec relay = sh("relay", "true");
  relay.relay = true;
  bad.workers.push_back(relay);
  LocalLauncher launcher(out_fd_, err_fd_);
  EXPECT_THROW(launcher.run(bad), Error);
}

}  // namespace
}  // namespace psrt::launch
