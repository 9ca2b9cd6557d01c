// psrun's options for `--launcher ssh`: the hosts (-H host1:4,host2:4 or --hostfile F with
// "host slots=N" lines), --server-hosts, --ssh-args, --dry-run. Which host runs what is
// runtime/launch/host_assignment.h.
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

// --ssh-args split on whitespace.
std::vector<std::string> split_ssh_args(const std::string& args);

}  // namespace psrt::psrun
