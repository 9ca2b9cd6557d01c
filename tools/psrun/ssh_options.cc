#include "tools/psrun/ssh_options.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "psrt/error.h"

namespace psrt::psrun {
namespace {

Error bad(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

int parse_slots(const std::string& text, const std::string& where) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size() && n >= 1 && n <= 4096) return n;
  } catch (...) {
  }
  throw bad(fmt::format("{}: slots '{}' is not a number from 1 to 4096", where, text));
}

// "host:4", "host", "[fd09::12]:4", "fd09::12" (bare IPv6: no slots).
HostSlots parse_entry(const std::string& entry) {
  HostSlots h;
  if (entry.empty()) throw bad("-H: an empty host entry (expected host1:4,host2:4)");
  if (entry.front() == '[') {
    const auto close = entry.find(']');
    if (close == std::string::npos) throw bad("-H: '" + entry + "' has no closing ']'");
    h.host = entry.substr(1, close - 1);
    if (close + 1 < entry.size()) {
      if (entry[close + 1] != ':') throw bad("-H: '" + entry + "': expected [address]:slots");
      h.slots = parse_slots(entry.substr(close + 2), "-H '" + entry + "'");
    }
    return h;
  }
  const auto colon = entry.find(':');
  if (colon == std::string::npos || entry.find(':', colon + 1) != std::string::npos) {
    h.host = entry;  // no slots, or a bare IPv6 address
    return h;
  }
  h.host = entry.substr(0, colon);
  h.slots = parse_slots(entry.substr(colon + 1), "-H '" + entry + "'");
  return h;
}

}  // namespace

void add_ssh_options(CLI::App& app, SshFlags& f) {
  app.add_option("-H,--hosts", f.hosts,
                 "--launcher ssh: hosts and their worker slots, host1:4,host2:4 (slots default "
                 "1; IPv6 as [fd00::1]:4); --launcher mpi: passed to mpirun as -H");
  app.add_option("--hostfile", f.hostfile,
                 "--launcher ssh: a file of 'host slots=N' lines (# comments), as mpirun reads; "
                 "--launcher mpi: passed to mpirun as --hostfile");
  app.add_option("--server-hosts", f.server_hosts,
                 "--launcher ssh: comma-separated hosts for the servers (round-robin; a host not "
                 "in -H runs servers only); default: servers round-robin over the -H hosts");
  app.add_option("--ssh-args", f.ssh_args,
                 "--launcher ssh: extra ssh options, e.g. \"-i key -p 2222\" (before psrun's own "
                 "-o BatchMode=yes ...; ssh takes the first value of an option)");
  app.add_flag("--dry-run", f.dry_run,
               "--launcher ssh: print the placement and, per host, exactly what would be started "
               "(the secret hidden); --launcher mpi or slurm: the mpirun/srun command, the "
               "variables it passes and the rank layout; then exit");
}

std::vector<HostSlots> parse_host_list(const std::string& list) {
  std::vector<HostSlots> out;
  std::stringstream in(list);
  for (std::string entry; std::getline(in, entry, ',');)
    out.push_back(parse_entry(entry));
  if (out.empty()) throw bad("-H: no hosts (expected host1:4,host2:4)");
  return out;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bad("--hostfile: cannot read '" + path + "'");
  std::vector<HostSlots> out;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    HostSlots h;
    if (!(words >> h.host)) continue;
    const std::string where = fmt::format("--hostfile {} line {}", path, number);
    for (std::string w; words >> w;) {
      if (w.rfind("slots=", 0) == 0)
        h.slots = parse_slots(w.substr(6), where);
      else if (w.rfind("max_slots=", 0) != 0)
        throw bad(fmt::format("{}: unknown '{}' (expected 'host slots=N')", where, w));
    }
    out.push_back(h);
  }
  if (out.empty()) throw bad("--hostfile: no hosts in '" + path + "'");
  return out;
}

std::vector<HostSlots> hosts_from(const SshFlags& f) {
  if (f.hosts.empty() == f.hostfile.empty())
    throw bad("--launcher ssh needs the hosts: either -H host1:4,host2:4 or --hostfile FILE");
  return f.hosts.empty() ? read_hostfile(f.hostfile) : parse_host_list(f.hosts);
}

Placement place(const std::vector<HostSlots>& hosts, const std::vector<std::string>& server_hosts,
                int servers, int workers) {
  const std::vector<HostSlots>& worker_hosts = hosts;
  int slots = 0;
  for (const auto& h : worker_hosts)
    slots += h.slots;
  if (worker_hosts.empty() || slots < workers)
    throw bad(
        fmt::format("{} workers do not fit into the {} slots of the hosts: give more hosts "
                    "or slots (-H host:SLOTS), or fewer workers (-n)",
                    workers, slots));
  Placement p;
  std::vector<int> used(worker_hosts.size(), 0);
  for (std::size_t next = 0; static_cast<int>(p.workers.size()) < workers; ++next) {
    const std::size_t i = next % worker_hosts.size();
    if (used[i] >= worker_hosts[i].slots) continue;
    ++used[i];
    p.workers.push_back(worker_hosts[i].host);
  }
  for (int s = 0; s < servers; ++s)
    p.servers.push_back(server_hosts.empty()
                            ? worker_hosts[static_cast<std::size_t>(s) % worker_hosts.size()].host
                            : server_hosts[static_cast<std::size_t>(s) % server_hosts.size()]);
  return p;
}

std::string describe_placement(const Placement& p) {
  std::vector<std::string> order;
  std::map<std::string, std::string> roles;
  auto add = [&](const std::string& host, const std::string& who) {
    if (!roles.count(host)) order.push_back(host);
    roles[host] += (roles[host].empty() ? "" : ", ") + who;
  };
  for (std::size_t i = 0; i < p.servers.size(); ++i)
    add(p.servers[i], fmt::format("server {}", i));
  for (std::size_t i = 0; i < p.workers.size(); ++i)
    add(p.workers[i], fmt::format("worker {}", i));
  std::string out;
  for (const auto& host : order)
    out += fmt::format("  {}: {}\n", host, roles[host]);
  return out;
}

std::vector<std::string> split_ssh_args(const std::string& args) {
  std::istringstream in(args);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

}  // namespace psrt::psrun
