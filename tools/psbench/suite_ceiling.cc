#include "suite_ceiling.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "child_command.h"

namespace psrt::bench {
namespace {

// The value of option `names` in psrun's arguments ("-H X", "--hosts X", "--hosts=X"), or "".
std::string option_value(const std::vector<std::string>& args,
                         const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    for (const auto& n : names) {
      if (args[i] == n && i + 1 < args.size()) return args[i + 1];
      if (args[i].rfind(n + "=", 0) == 0) return args[i].substr(n.size() + 1);
    }
  }
  return "";
}

// "h1:4,[fd09::12]:2,h3" -> {"h1", "fd09::12", "h3"}.
std::vector<std::string> host_names(const std::string& list) {
  std::vector<std::string> hosts;
  std::istringstream in(list);
  for (std::string e; std::getline(in, e, ',');) {
    if (e.empty()) continue;
    if (e.front() == '[') {
      hosts.push_back(e.substr(1, e.find(']') - 1));
    } else if (std::count(e.begin(), e.end(), ':') == 1) {
      hosts.push_back(e.substr(0, e.find(':')));
    } else {
      hosts.push_back(e);  // no slots, or a bare IPv6 address
    }
  }
  return hosts;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;)
    words.push_back(w);
  return words;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((std::filesystem::path(d) / program).c_str(), X_OK) == 0)
      return true;
  }
  return false;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 13337;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 13337;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A port for a remote listener: one of 20000-39999 (nothing tells which are free there).
int random_port() {
  static std::mt19937 rng{std::random_device{}()};
  return std::uniform_int_distribution<int>(20000, 39999)(rng);
}

// The UCX variables the measurement runs with.
std::vector<std::pair<std::string, std::string>> ucx_env(const std::string& transport) {
  if (transport == "tcp") return {{"UCX_TLS", "tcp"}};
  std::vector<std::pair<std::string, std::string>> env;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"}) {
    if (const char* v = std::getenv(name)) env.emplace_back(name, v);
  }
  return env;
}

// argv running `command` on `host` through ssh (the remote shell gets words without spaces).
std::vector<std::string> over_ssh(const CeilingPlan& plan, const std::string& host,
                                  const std::vector<std::string>& command) {
  std::vector<std::string> argv{"ssh"};
  argv.insert(argv.end(), plan.ssh_args.begin(), plan.ssh_args.end());
  argv.push_back(host);
  argv.emplace_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::optional<double> final_gbps(const std::string& out) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Final:", 0) != 0) continue;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;)
      f.push_back(w);
    // Final: iters typical_lat avg_lat overall_lat avg_bw overall_bw (MB/s = 2^20 B/s) ...
    if (f.size() >= 7) return std::stod(f[6]) * 1048576.0 / 1e9;
  }
  return std::nullopt;
}

}  // namespace

std::optional<CeilingPlan> plan_ceiling(const std::vector<std::string>& psrun_args,
                                        std::string& why_not) {
  std::string launcher = option_value(psrun_args, {"--launcher"});
  if (launcher.empty()) launcher = "local";
  CeilingPlan plan;
  if (launcher == "local") {
    if (!on_path("ucx_perftest")) {
      why_not = "ucx_perftest is not on PATH (Debian: ucx-utils)";
      return std::nullopt;
    }
    return plan;
  }
  if (launcher != "ssh") {
    why_not = "--launcher " + launcher + " places the ranks itself; --link-gbps gives the rate";
    return std::nullopt;
  }
  const auto hosts = host_names(option_value(psrun_args, {"-H", "--hosts"}));
  const auto servers = host_names(option_value(psrun_args, {"--server-hosts"}));
  if (hosts.empty()) {
    why_not = "the ssh job names its hosts in a --hostfile; give -H for a ceiling";
    return std::nullopt;
  }
  plan.local = false;
  plan.server_host = servers.empty() ? hosts.front() : servers.front();
  const auto other = std::find_if(hosts.begin(), hosts.end(),
                                  [&](const std::string& h) { return h != plan.server_host; });
  if (other == hosts.end()) {
    why_not = "every process is on " + plan.server_host + "; no link between two hosts to measure";
    return std::nullopt;
  }
  plan.client_host = *other;
  plan.ssh_args = split_words(option_value(psrun_args, {"--ssh-args"}));
  return plan;
}

std::optional<double> perftest_gbps(const CeilingPlan& plan, const std::string& transport,
                                    std::size_t size) {
  const auto env = ucx_env(transport);
  const std::string port = std::to_string(plan.local ? free_local_port() : random_port());
  // About 512 MiB per measurement, between 20 and 20000 messages, a tenth as warm-up.
  const std::size_t iters = std::clamp<std::size_t>((std::size_t{512} << 20) / size, 20, 20000);
  const std::vector<std::string> test{"-p", port,
                                      "-t", "tag_bw",
                                      "-s", std::to_string(size),
                                      "-n", std::to_string(iters),
                                      "-w", std::to_string(std::max<std::size_t>(iters / 10, 2))};
  std::vector<std::string> server_cmd, client_cmd;
  EnvChanges local_env;
  if (plan.local) {
    for (const auto& [k, v] : env)
      local_env.emplace_back(k, v);
    server_cmd = {"ucx_perftest", "-p", port};
    client_cmd = {"ucx_perftest", "127.0.0.1"};
    client_cmd.insert(client_cmd.end(), test.begin(), test.end());
  } else {
    std::vector<std::string> prefix{"env"};
    for (const auto& [k, v] : env) {
      std::string kv = k;
      kv += '=';
      kv += v;
      prefix.push_back(std::move(kv));
    }
    std::vector<std::string> server = prefix, client = prefix;
    server.insert(server.end(), {"timeout", "60", "ucx_perftest", "-p", port});
    client.insert(client.end(), {"timeout", "120", "ucx_perftest", plan.server_host});
    client.insert(client.end(), test.begin(), test.end());
    server_cmd = over_ssh(plan, plan.server_host, server);
    client_cmd = over_ssh(plan, plan.client_host, client);
  }
  BackgroundCommand server(server_cmd, local_env);
  CommandOutput r;
  for (int attempt = 0; attempt < 50; ++attempt) {  // until the server listens (≤ ~5 s locally)
    r = run_bounded(client_cmd, local_env, std::chrono::seconds(150));
    if (r.exit_code == 0 || r.timed_out) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  server.wait_exit(std::chrono::seconds(5));
  if (auto gbps = final_gbps(r.out)) return gbps;
  std::cerr << "psbench suite: ucx_perftest tag_bw at " << size << " B"
            << (plan.local ? "" : " from " + plan.client_host + " to " + plan.server_host)
            << " gave no result ("
            << (r.timed_out ? "timed out" : "exit code " + std::to_string(r.exit_code))
            << "); no ceiling for this transport\n";
  return std::nullopt;
}

}  // namespace psrt::bench
