// Which host runs each server and worker of an ssh job (runtime/launch/host_assignment.h).
#include "runtime/launch/host_assignment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "psrt/error.h"

namespace psrt::launch {
namespace {

using Hosts = std::vector<std::string>;

std::string error_of(void (*f)()) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

TEST(HostList, ParsesSlotsNamesAndIpv6) {
  const auto h = parse_host_list("a:4,b,[fd09::12]:2,fd09::13");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].host, "a");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].host, "b");
  EXPECT_EQ(h[1].slots, 1);
  EXPECT_EQ(h[2].host, "fd09::12");
  EXPECT_EQ(h[2].slots, 2);
  EXPECT_EQ(h[3].host, "fd09::13");
  EXPECT_EQ(h[3].slots, 1);
}

TEST(HostList, NamesTheBadEntry) {
  EXPECT_EQ(error_of([] { parse_host_list("a:0"); }),
            "-H 'a:0': slots '0' is not a number from 1 to 4096");
  EXPECT_EQ(error_of([] { parse_host_list("a,,b"); }),
            "-H: an empty host entry (expected host1:4,host2:4)");
  EXPECT_EQ(error_of([] { hosts_from("", ""); }),
            "--launcher ssh needs the hosts: either -H host1:4,host2:4 or --hostfile FILE");
}

TEST(HostList, ReadsAHostfileAndNamesItsBadLine) {
  char path[] = "/tmp/psrt_hostfile_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << "# hosts\na slots=2\n\nb max_slots=9 # one slot\nc slot=3\n";
  try {
    read_hostfile(path);
    ADD_FAILURE() << "a bad line was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--hostfile " + std::string(path) +
                                         " line 5: unknown 'slot=3' (expected 'host slots=N')");
  }
  std::ofstream(path) << "a slots=2\nb\n";
  const auto h = hosts_from("", path);
  ::unlink(path);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].host, "a");
  EXPECT_EQ(h[0].slots, 2);
  EXPECT_EQ(h[1].host, "b");
  EXPECT_EQ(h[1].slots, 1);
}

TEST(HostAssignment, WorkersRoundRobinOverSlotsServersOverTheirHosts) {
  const auto a = assign_hosts(parse_host_list("a:1,b:3"), {}, 3, 4);
  EXPECT_EQ(a.workers, (Hosts{"a", "b", "b", "b"}));
  EXPECT_EQ(a.servers, (Hosts{"a", "b", "a"}));
  const auto s = assign_hosts(parse_host_list("a:2,b:2"), {"c", "d"}, 3, 3);
  EXPECT_EQ(s.workers, (Hosts{"a", "b", "a"}));
  EXPECT_EQ(s.servers, (Hosts{"c", "d", "c"}));
  EXPECT_EQ(describe_assignment(s),
            "  c: server 0, server 2\n  d: server 1\n  a: worker 0, worker 2\n  b: worker 1\n");
  EXPECT_EQ(hosts_of(s), (Hosts{"a", "b", "c", "d"}));
  EXPECT_EQ(error_of([] { assign_hosts(parse_host_list("a:1,b:2"), {}, 1, 4); }),
            "4 workers do not fit into the 3 slots of the hosts: give more hosts or slots (-H "
            "host:SLOTS), or fewer workers (-n)");
}

TEST(HostAssignment, LostHostsGiveTheirProcessesToTheOthers) {
  HostAssignment a{{"a", "b"}, {"a", "b", "c", "b"}};
  const auto moved = move_off_hosts(a, {"b"});
  EXPECT_EQ(moved.servers, (Hosts{"a", "a"}));
  EXPECT_EQ(moved.workers, (Hosts{"a", "a", "c", "c"}));
  EXPECT_EQ(error_of([] {
              move_off_hosts({{"a"}, {"a"}}, {"a"});
            }),
            "no host of the job answers ssh any more");
}

// psrun --min-workers: the workers of lost hosts are dropped (the others keep their order), the
// servers of lost hosts still move, and too few workers left is refused with the counts.
TEST(HostAssignment, MinWorkersDropsTheWorkersOfLostHostsAndKeepsTheServers) {
  const HostAssignment a{{"s", "b"}, {"b", "c", "d", "b", "c"}};
  const auto two_lost = drop_lost_workers(a, {"b"}, 3);
  EXPECT_EQ(two_lost.workers, (Hosts{"c", "d", "c"}));
  EXPECT_EQ(two_lost.servers, (Hosts{"s", "s"}));
  const auto one_lost = drop_lost_workers(a, {"d"}, 1);
  EXPECT_EQ(one_lost.workers, (Hosts{"b", "c", "b", "c"}));
  EXPECT_EQ(one_lost.servers, a.servers);
  const auto none_lost = drop_lost_workers(a, {}, 5);
  EXPECT_EQ(none_lost.workers, a.workers);
  EXPECT_EQ(none_lost.servers, a.servers);
  // A lost host that ran servers only: its servers move, every worker stays.
  const auto server_lost = drop_lost_workers(a, {"s"}, 5);
  EXPECT_EQ(server_lost.workers, a.workers);
  EXPECT_EQ(server_lost.servers, (Hosts{"b", "b"}));
  EXPECT_EQ(error_of([] {
              drop_lost_workers({{"s"}, {"b", "c", "d", "b", "c"}}, {"b", "d"}, 3);
            }),
            "2 of the job's 5 workers run on hosts that still answer, fewer than --min-workers 3");
  EXPECT_EQ(error_of([] {
              drop_lost_workers({{"b"}, {"b", "c"}}, {"b", "c"}, 1);
            }),
            "0 of the job's 2 workers run on hosts that still answer, fewer than --min-workers 1");
}

}  // namespace
}  // namespace psrt::launch
