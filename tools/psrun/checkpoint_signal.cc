#include "tools/psrun/checkpoint_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "ps/job_checkpoint.h"

namespace psrt::psrun {
namespace {

// Set before the handler is installed, read-only after.
char g_path[4096];
char g_tmp[4096 + 8];
bool g_have_dir = false;

void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

void on_sigusr1(int /*sig*/) {
  const int saved = errno;
  if (!g_have_dir) {
    say("psrun: got SIGUSR1, but the job has no --checkpoint-dir: no checkpoint\n");
    errno = saved;
    return;
  }
  const int fd = ::open(g_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    const ssize_t n = ::write(fd, "1\n", 2);
    (void)n;
    ::close(fd);
  }
  if (fd >= 0 && ::rename(g_tmp, g_path) == 0)
    say("psrun: got SIGUSR1: asked the job for a checkpoint at its next round\n");
  else
    say("psrun: got SIGUSR1, but could not write CHECKPOINT-NOW into --checkpoint-dir\n");
  errno = saved;
}

}  // namespace

void install_checkpoint_signal(const std::string& checkpoint_dir) {
  const std::string path = ps::checkpoint_now_path(checkpoint_dir);
  g_have_dir = !checkpoint_dir.empty() && path.size() < sizeof g_path;
  if (g_have_dir) {
    std::snprintf(g_path, sizeof g_path, "%s", path.c_str());
    std::snprintf(g_tmp, sizeof g_tmp, "%s.tmp", path.c_str());
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace psrt::psrun
