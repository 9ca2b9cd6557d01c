// The one spawn helper (runtime/launch/spawn.h) against real processes (/bin/sh).
#include "runtime/launch/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace psrt::launch {
namespace {

// Runs `r` with stdout on a pipe; its output and exit status.
std::pair<std::string, int> output_of(SpawnRequest r) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  r.out = fds[1];
  const Spawned s = spawn(r);
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  if (s.failure) return {"failed: " + describe(*s.failure, r.argv[0], r.cpus), -1};
  int status = 0;
  ::waitpid(s.pid, &status, 0);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

TEST(Spawn, EnvironmentChangesSetAndRemoveOnTopOfOurs) {
  ::setenv("PSRT_SPAWN_KEEP", "kept", 1);
  ::setenv("PSRT_SPAWN_DROP", "dropped", 1);
  ::setenv("PSRT_SPAWN_SET", "old", 1);
  SpawnRequest r;
  r.argv = {"sh", "-c",
            "echo \"$PSRT_SPAWN_KEEP ${PSRT_SPAWN_DROP-unset} $PSRT_SPAWN_SET $PSRT_SPAWN_NEW\""};
  r.env = {{"PSRT_SPAWN_DROP", std::nullopt}, {"PSRT_SPAWN_SET", "new"}, {"PSRT_SPAWN_NEW", "1"}};
  EXPECT_EQ(output_of(r), std::make_pair(std::string("kept unset new 1\n"), 0));
}

TEST(Spawn, StdinIsDevNullAndOurOtherDescriptorsStayHere) {
  const int mine = ::open("/dev/null", O_RDONLY);  // not close-on-exec
  ASSERT_GT(mine, 2);
  SpawnRequest r;
  r.argv = {"sh", "-c",
            "cat; test -e /proc/self/fd/" + std::to_string(mine) + " && echo leaked || echo ok"};
  EXPECT_EQ(output_of(r), std::make_pair(std::string("ok\n"), 0));
  ::close(mine);
}

TEST(Spawn, OwnGroupMakesTheChildItsGroupLeader) {
  SpawnRequest r;
  r.argv = {"sh", "-c",
            "read -r pid comm state ppid pgid rest < /proc/$$/stat; "
            "test \"$pid\" = \"$pgid\" && echo leader || echo \"$pid in $pgid\""};
  r.own_group = true;
  EXPECT_EQ(output_of(r), std::make_pair(std::string("leader\n"), 0));
  r.own_group = false;
  EXPECT_NE(output_of(r).first, "leader\n");
}

TEST(Spawn, FailuresAreNamedAndLeaveNothingToReap) {
  SpawnRequest r;
  r.argv = {"psrt-no-such-program"};
  const Spawned s = spawn(r);
  ASSERT_TRUE(s.failure);
  EXPECT_EQ(s.failure->step, SpawnFailure::Step::kExec);
  EXPECT_EQ(describe(*s.failure, r.argv[0], r.cpus),
            "cannot run 'psrt-no-such-program': No such file or directory");
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  r.argv = {"true"};
  r.cpus = {1 << 20};  // no such CPU
  const Spawned bound = spawn(r);
  ASSERT_TRUE(bound.failure);
  EXPECT_EQ(bound.failure->step, SpawnFailure::Step::kAffinity);
  EXPECT_EQ(describe(*bound.failure, "true", r.cpus),
            "cannot start 'true': binding it to CPUs 1048576 failed: sched_setaffinity: Invalid "
            "argument (CPUs this host lacks or psrun may not use; psrun --bind none leaves "
            "processes unbound)");
}

}  // namespace
}  // namespace psrt::launch
