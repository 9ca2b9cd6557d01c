// Which host runs each server and worker of a job that psrun starts on other hosts (--launcher
// ssh): the hosts and their worker slots (-H host1:4,host2:4 or a hostfile of "host slots=N"
// lines, as mpirun reads them), the round-robin assignment over them, and the assignment after
// hosts are lost (a restart moves their processes to the others, or with psrun --min-workers
// goes on without their workers).
//
//   auto a = psrt::launch::assign_hosts(psrt::launch::parse_host_list("a:2,b:2"), {}, 1, 4);
//   // a.workers == {"a", "b", "a", "b"}, a.servers == {"a"}
#pragma once

#include <set>
#include <string>
#include <vector>

namespace psrt::launch {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "h1:4,h2,[fd09::12]:2" (slots default 1). Throws psrt::Error(kInvalidArgument) naming the entry.
std::vector<HostSlots> parse_host_list(const std::string& list);
// Lines "host slots=N" (slots= optional, default 1); '#' starts a comment. Throws naming the
// file and line.
std::vector<HostSlots> read_hostfile(const std::string& path);
// The hosts of -H `list` or --hostfile `path`; throws when neither or both are given.
std::vector<HostSlots> hosts_from(const std::string& list, const std::string& path);

struct HostAssignment {
  std::vector<std::string> servers;  // host of server i
  std::vector<std::string> workers;  // host of worker i
};

// Round-robin: worker i goes to the next host (in the given order) with a free slot; servers go
// round-robin over `server_hosts` when given (a host there but not in `hosts` runs servers only),
// else over `hosts`; servers take no slots (slots count workers, e.g. one per GPU). Throws
// psrt::Error(kInvalidArgument) when the workers do not fit into the slots, naming both counts.
HostAssignment assign_hosts(const std::vector<HostSlots>& hosts,
                            const std::vector<std::string>& server_hosts, int servers, int workers);

// "server 0 -> b, server 1 -> c, worker 0 -> a, ..." grouped per host, one line per host.
std::string describe_assignment(const HostAssignment& a);

// The job's hosts, each once, sorted.
std::vector<std::string> hosts_of(const HostAssignment& a);

// `a` with every server and worker of a host in `lost` moved to the remaining hosts, round-robin
// (servers over the remaining hosts that ran servers, else over all remaining hosts; workers
// likewise). Throws psrt::Error(kInvalidArgument) when no host remains.
HostAssignment move_off_hosts(const HostAssignment& a, const std::set<std::string>& lost);

// psrun --min-workers: `a` without the workers of the hosts in `lost` (the others keep their
// order, so worker i is the i-th that remains) and with the servers of those hosts moved as
// move_off_hosts moves them (a job checkpoint needs as many servers as before). Throws
// psrt::Error(kInvalidArgument) when fewer than `min_workers` workers remain, naming how many
// remain, of how many, and the minimum; or when no host remains.
HostAssignment drop_lost_workers(const HostAssignment& a, const std::set<std::string>& lost,
                                 int min_workers);

}  // namespace psrt::launch
