#include "tools/psrun/host_loss.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <thread>

#include "psrt/error.h"

extern char** environ;

namespace psrt::psrun {
namespace {

// The hosts of `group` (in order of first appearance) that are not in `lost`.
std::vector<std::string> remaining(const std::vector<std::string>& group,
                                   const std::set<std::string>& lost) {
  std::vector<std::string> out;
  for (const auto& h : group)
    if (!lost.count(h) && std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  return out;
}

void move_group(std::vector<std::string>& group, const std::set<std::string>& lost,
                const std::vector<std::string>& fallback) {
  std::vector<std::string> to = remaining(group, lost);
  if (to.empty()) to = fallback;
  std::size_t next = 0;
  for (auto& h : group)
    if (lost.count(h)) h = to[next++ % to.size()];
}

}  // namespace

std::vector<std::pair<std::string, std::string>> unreachable_hosts(
    const std::vector<std::string>& hosts, const std::vector<std::string>& ssh_args,
    std::chrono::milliseconds limit) {
  const auto seconds = std::max<long long>(1, limit.count() / 1000);
  std::vector<std::pair<std::string, pid_t>> probes;
  std::vector<std::pair<std::string, std::string>> lost;
  for (const auto& host : hosts) {
    std::vector<std::string> argv = {"ssh"};
    argv.insert(argv.end(), ssh_args.begin(), ssh_args.end());
    for (const std::string& s :
         {std::string("-T"), std::string("-o"), std::string("BatchMode=yes"), std::string("-o"),
          fmt::format("ConnectTimeout={}", seconds), host, std::string("true")})
      argv.push_back(s);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (auto& s : argv)
      args.push_back(s.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, "ssh", &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      lost.emplace_back(host, fmt::format("cannot run ssh: {}", std::strerror(rc)));
      continue;
    }
    probes.emplace_back(host, pid);
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

Placement move_off_hosts(const Placement& p, const std::set<std::string>& lost) {
  std::vector<std::string> all = p.servers;
  all.insert(all.end(), p.workers.begin(), p.workers.end());
  const std::vector<std::string> left = remaining(all, lost);
  if (left.empty())
    throw Error(ErrorCode::kInvalidArgument, "no host of the job answers ssh any more");
  Placement moved = p;
  move_group(moved.servers, lost, left);
  move_group(moved.workers, lost, left);
  return moved;
}

}  // namespace psrt::psrun
