#include "runtime/launch/host_assignment.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "psrt/error.h"

namespace psrt::launch {
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

std::vector<HostSlots> hosts_from(const std::string& list, const std::string& path) {
  if (list.empty() == path.empty())
    throw bad("--launcher ssh needs the hosts: either -H host1:4,host2:4 or --hostfile FILE");
  return list.empty() ? read_hostfile(path) : parse_host_list(list);
}

HostAssignment assign_hosts(const std::vector<HostSlots>& hosts,
                            const std::vector<std::string>& server_hosts, int servers,
                            int workers) {
  const std::vector<HostSlots>& worker_hosts = hosts;
  int slots = 0;
  for (const auto& h : worker_hosts)
    slots += h.slots;
  if (worker_hosts.empty() || slots < workers)
    throw bad(
        fmt::format("{} workers do not fit into the {} slots of the hosts: give more hosts "
                    "or slots (-H host:SLOTS), or fewer workers (-n)",
                    workers, slots));
  HostAssignment p;
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

std::string describe_assignment(const HostAssignment& p) {
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

std::vector<std::string> hosts_of(const HostAssignment& a) {
  std::vector<std::string> hosts = a.servers;
  hosts.insert(hosts.end(), a.workers.begin(), a.workers.end());
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return hosts;
}

HostAssignment move_off_hosts(const HostAssignment& p, const std::set<std::string>& lost) {
  std::vector<std::string> all = p.servers;
  all.insert(all.end(), p.workers.begin(), p.workers.end());
  const std::vector<std::string> left = remaining(all, lost);
  if (left.empty())
    throw Error(ErrorCode::kInvalidArgument, "no host of the job answers ssh any more");
  HostAssignment moved = p;
  move_group(moved.servers, lost, left);
  move_group(moved.workers, lost, left);
  return moved;
}

HostAssignment drop_lost_workers(const HostAssignment& a, const std::set<std::string>& lost,
                                 int min_workers) {
  std::vector<std::string> workers;
  for (const auto& h : a.workers)
    if (!lost.count(h)) workers.push_back(h);
  if (static_cast<int>(workers.size()) < min_workers)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} of the job's {} workers run on hosts that still answer, fewer "
                            "than --min-workers {}",
                            workers.size(), a.workers.size(), min_workers));
  HostAssignment out = move_off_hosts(a, lost);
  out.workers = std::move(workers);
  return out;
}

}  // namespace psrt::launch
