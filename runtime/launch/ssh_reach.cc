#include "runtime/launch/ssh_reach.h"

#include <fmt/core.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <thread>

#include "runtime/launch/spawn.h"

namespace psrt::launch {

std::vector<std::pair<std::string, std::string>> unreachable_hosts(
    const std::vector<std::string>& hosts, const std::vector<std::string>& ssh_args,
    std::chrono::milliseconds limit) {
  const auto seconds = std::max<long long>(1, limit.count() / 1000);
  std::vector<std::pair<std::string, pid_t>> probes;
  std::vector<std::pair<std::string, std::string>> lost;
  for (const auto& host : hosts) {
    SpawnRequest r;
    r.argv = {"ssh"};
    r.argv.insert(r.argv.end(), ssh_args.begin(), ssh_args.end());
    r.argv.insert(r.argv.end(), {"-T", "-o", "BatchMode=yes", "-o",
                                 fmt::format("ConnectTimeout={}", seconds), host, "true"});
    r.in = r.out = r.err = kNullFd;
    const Spawned s = spawn(r);
    if (s.failure) {
      lost.emplace_back(host, fmt::format("cannot run ssh: {}", std::strerror(s.failure->error)));
      continue;
    }
    probes.emplace_back(host, s.pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit + std::chrono::seconds(1);
  for (auto& [host, pid] : probes) {
    int status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (got == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      lost.emplace_back(host, fmt::format("no answer within {} ms", limit.count()));
    } else if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      lost.emplace_back(
          host, fmt::format("ssh exited with status {}",
                            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
    }
  }
  return lost;
}

}  // namespace psrt::launch
