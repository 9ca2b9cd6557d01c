// psrun's options for `--launcher ssh`: the hosts (-H host1:4,host2:4 or --hostfile F with
// "host slots=N" lines), --server-hosts, --ssh-args, --dry-run, and the placement of servers and
// workers over the hosts.
#pragma once

#include <string>
#include <vector>

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct SshFlags {
  std::string hosts;         // -H
  std::string hostfile;      // --hostfile
  std::string server_hosts;  // --server-hosts
  std::string ssh_args;      // --ssh-args (split on spaces)
  bool dry_run = false;      // --dry-run
};

void add_ssh_options(CLI::App& app, SshFlags& flags);

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "h1:4,h2,[fd09::12]:2" (slots default 1). Throws psrt::Error(kInvalidArgument) naming the entry.
std::vector<HostSlots> parse_host_list(const std::string& list);
// Lines "host slots=N" (slots= optional, default 1); '#' starts a comment. Throws naming the
// file and line.
std::vector<HostSlots> read_hostfile(const std::string& path);

struct Placement {
  std::vector<std::string> servers;  // host of server i
  std::vector<std::string> workers;  // host of worker i
};

// Round-robin: worker i goes to the next host (in the given order) with a free slot; servers go
// round-robin over `server_hosts` when given (a host there but not in `hosts` runs servers only),
// else over `hosts`; servers take no slots (slots count workers, e.g. one per GPU). Throws
// psrt::Error(kInvalidArgument) when the workers do not fit into the slots, naming both counts.
Placement place(const std::vector<HostSlots>& hosts, const std::vector<std::string>& server_hosts,
                int servers, int workers);

// The hosts of -H / --hostfile; throws when neither or both are given.
std::vector<HostSlots> hosts_from(const SshFlags& flags);

// "server 0 -> b, server 1 -> c, worker 0 -> a, ..." grouped per host, one line per host.
std::string describe_placement(const Placement& p);

// --ssh-args split on whitespace.
std::vector<std::string> split_ssh_args(const std::string& args);

}  // namespace psrt::psrun
