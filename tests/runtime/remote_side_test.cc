// The remote side of an ssh-launched process (psrun --internal-remote,
// runtime/launch/remote_side.h) driven directly through a pipe, as sshd would: the environment from
// stdin, the exit status passed on, and the command's process group killed when stdin ends,
// keepalives stop, or an "S<n>" line asks for a signal. Runs anywhere (no ssh, no namespaces).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// `psrun --internal-remote --keepalive-timeout-ms T -- sh -c SCRIPT` with pipes on stdin and
// stdout+stderr.
class Remote {
 public:
  Remote(const std::string& script, int keepalive_ms)
      : Remote({"--keepalive-timeout-ms", std::to_string(keepalive_ms), "--", "/bin/sh", "-c",
                script}) {}
  // `psrun --internal-remote ARGS...`.
  explicit Remote(std::vector<std::string> args) {
    args.insert(args.begin(), {PSRUN_PATH, "--internal-remote"});
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execv(PSRUN_PATH, argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Remote() {
    close_stdin();
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(stdout_);
  }
  void send(const std::string& s) {
    ASSERT_EQ(::write(stdin_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  // Output until `needle` appears (bounded).
  bool wait_output(const std::string& needle, std::chrono::milliseconds limit = 5s) {
    const auto end = Clock::now() + limit;
    while (out_.find(needle) == std::string::npos && Clock::now() < end)
      read_some(20);
    return out_.find(needle) != std::string::npos;
  }
  // The exit status (128 + signal), or -1 past `limit`; the rest of the output is read.
  int wait(std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        while (read_some(50)) {
        }
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      read_some(10);
    }
    return -1;
  }
  const std::string& out() const { return out_; }

 private:
  bool read_some(int ms) {
    pollfd p{stdout_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(stdout_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, status_ = -1;
  std::string out_;
};

// Gone, or a zombie left for a parent that is not us (its shell was killed too).
bool gone(pid_t pid) {
  for (int i = 0; i < 100; ++i, std::this_thread::sleep_for(10ms)) {
    if (::kill(pid, 0) != 0) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
  }
  return false;
}

pid_t pid_in(const std::string& out, const std::string& tag) {
  const auto at = out.find(tag);
  return at == std::string::npos ? -1 : std::stoi(out.substr(at + tag.size()));
}

TEST(RemoteSide, TheEnvironmentComesFromStdinAndTheExitStatusIsPassedOn) {
  Remote r("echo \"x=$PSRT_X y=$PSRT_Y\"; exit 7", 5000);
  r.send("PSRT_X=abc\nPSRT_Y=with spaces = and more\n\n");
  EXPECT_EQ(r.wait(5s), 7) << r.out();
  EXPECT_NE(r.out().find("x=abc y=with spaces = and more"), std::string::npos) << r.out();
}

TEST(RemoteSide, EndOfStdinKillsTheCommandsWholeGroup) {
  Remote r(R"(sleep 300 & echo "bg $!"; echo "sh $$"; wait)", 5000);
  r.send("\n");
  ASSERT_TRUE(r.wait_output("sh ")) << r.out();
  ASSERT_TRUE(r.wait_output("\n", 1s));
  const pid_t bg = pid_in(r.out(), "bg "), shell = pid_in(r.out(), "sh ");
  ASSERT_GT(bg, 0);
  r.close_stdin();
  EXPECT_EQ(r.wait(3s), 1) << r.out();
  EXPECT_NE(r.out().find("psrun's connection closed"), std::string::npos) << r.out();
  EXPECT_TRUE(gone(bg)) << "the command's background process survived";
  EXPECT_TRUE(gone(shell));
}

TEST(RemoteSide, MissingKeepalivesKillTheCommandAfterTheTimeout) {
  Remote r("echo \"sh $$\"; exec sleep 300", 600);
  r.send("\n");
  ASSERT_TRUE(r.wait_output("sh ")) << r.out();
  const auto start = Clock::now();
  for (int i = 0; i < 4; ++i, std::this_thread::sleep_for(200ms))
    r.send("\n");  // keepalives for ~0.8 s: still running
  EXPECT_EQ(r.wait(10ms), -1) << r.out();
  EXPECT_EQ(r.wait(3s), 1) << r.out();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(s, 0.6 + 0.6) << r.out();
  EXPECT_NE(r.out().find("no keepalive from psrun for 600 ms"), std::string::npos) << r.out();
  EXPECT_TRUE(gone(pid_in(r.out(), "sh ")));
}

TEST(RemoteSide, ASignalLineIsForwardedToTheCommand) {
  Remote r("trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done", 5000);
  r.send("\n");
  ASSERT_TRUE(r.wait_output("ready")) << r.out();
  r.send("S15\n");
  EXPECT_EQ(r.wait(3s), 3) << r.out();
  EXPECT_NE(r.out().find("got TERM"), std::string::npos) << r.out();
}

TEST(RemoteSide, NoEnvironmentBlockStartsNothing) {
  Remote r("echo started", 300);
  EXPECT_EQ(r.wait(3s), 1) << r.out();
  EXPECT_EQ(r.out().find("started"), std::string::npos) << r.out();
  EXPECT_NE(r.out().find("sent no environment"), std::string::npos) << r.out();
}

// --cwd: psrun's working directory. Where this host has it, the command runs there (a relative
// program found); where it lacks it, a program relative to it is refused naming the fix, and
// any other runs in the login directory, said on stderr.
TEST(RemoteSide, CwdIsWhereTheCommandRunsAndARelativeProgramWithoutItIsRefused) {
  char dir_template[] = "/tmp/psrt_remote_cwd_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::ofstream(dir + "/prog.sh") << "#!/bin/sh\necho \"ran in $(pwd)\"\n";
  ASSERT_EQ(::chmod((dir + "/prog.sh").c_str(), 0755), 0);
  {
    Remote r({"--cwd", dir, "--", "./prog.sh"});
    r.send("\n");
    EXPECT_EQ(r.wait(5s), 0) << r.out();
    EXPECT_EQ(r.out(), "ran in " + dir + "\n");
  }
  const std::string gone = dir + "/not-here";
  {
    Remote r({"--cwd", gone, "--", "./prog.sh"});
    r.send("\n");
    EXPECT_EQ(r.wait(5s), 127) << r.out();
    EXPECT_NE(
        r.out().find(": the program './prog.sh' is relative to psrun's working directory " + gone +
                     ", which this host lacks (No such file or directory): give the "
                     "program's absolute path, or start psrun from a directory every host "
                     "has at the same path (a shared filesystem); not starting the command\n"),
        std::string::npos)
        << r.out();
  }
  {
    Remote r({"--cwd", gone, "--", "/bin/sh", "-c", "echo ok"});
    r.send("\n");
    EXPECT_EQ(r.wait(5s), 0) << r.out();
    EXPECT_NE(
        r.out().find("psrun's working directory " + gone +
                     " is not on this host (No such file or directory): the command runs in "),
        std::string::npos)
        << r.out();
    EXPECT_NE(r.out().find("ok\n"), std::string::npos) << r.out();
  }
  ::unlink((dir + "/prog.sh").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
