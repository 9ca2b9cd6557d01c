#include "peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "base/sys_check.h"
#include "psrt/error.h"
#include "runtime/launch/spawn.h"

namespace psrt::bench {

PeerProcess::PeerProcess(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  int pipefd[2];
  PSRT_SYS_CHECK(::pipe2(pipefd, O_CLOEXEC));
  launch::SpawnRequest r;
  r.argv = {"/proc/self/exe"};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  r.in = r.err = launch::kInheritFd;
  r.out = pipefd[1];
  const launch::Spawned s = launch::spawn(r);
  ::close(pipefd[1]);
  out_fd_ = pipefd[0];
  if (s.failure) throw_system_error("starting the peer process", s.failure->error);
  pid_ = s.pid;

  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (line.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{out_fd_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      throw Error(ErrorCode::kTimeout, "peer process did not start listening in time");
    }
    char buf[256];
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) throw Error(ErrorCode::kConnectionClosed, "peer process exited before listening");
    line.append(buf, static_cast<std::size_t>(n));
  }
  line.resize(line.find('\n'));
  const std::string tag = "LISTENING ";
  if (line.rfind(tag, 0) != 0) {
    throw Error(ErrorCode::kProtocol, "peer process printed '" + line + "' instead of LISTENING");
  }
  address_ = line.substr(tag.size());
}

bool PeerProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

PeerProcess::~PeerProcess() {
  if (!wait_exit(std::chrono::seconds(3)) && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
}

void announce_listening(const std::string& address) {
  std::printf("LISTENING %s\n", address.c_str());
  std::fflush(stdout);
}

}  // namespace psrt::bench
