#include "runtime/launch/ssh_launcher.h"

#include <algorithm>
#include <map>
#include <string>

#include "psrt/error.h"
#include "runtime/launch/local_launcher.h"

extern char** environ;

namespace psrt::launch {
namespace {

// Single quotes for a POSIX shell: the remote login shell parses ssh's command string.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-./=:,+@%") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// psrun's own PSRT_* and UCX_* variables, then the spec's on top.
std::vector<std::pair<std::string, std::string>> remote_environment(const ProcessSpec& spec) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    if (kv.rfind("PSRT_", 0) == 0 || kv.rfind("UCX_", 0) == 0)
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.env)
    env[k] = v;
  return {env.begin(), env.end()};
}

std::string remote_command(const ProcessSpec& spec, const SshOptions& o) {
  std::string cmd = "exec " + shell_quote(o.remote_psrun) + " --internal-remote ";
  if (!o.cwd.empty()) cmd += "--cwd " + shell_quote(o.cwd) + " ";
  cmd += "--keepalive-timeout-ms " + std::to_string(o.keepalive_timeout.count()) + " --";
  for (const auto& a : spec.argv) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  return cmd;
}

std::vector<std::string> ssh_argv(const ProcessSpec& spec, const SshOptions& o) {
  const long alive_s = std::max<long>(1, static_cast<long>(o.keepalive_timeout.count() / 3000));
  std::vector<std::string> argv = {o.ssh};
  argv.insert(argv.end(), o.ssh_args.begin(), o.ssh_args.end());
  for (const std::string& opt :
       {std::string("BatchMode=yes"), "ServerAliveInterval=" + std::to_string(alive_s),
        std::string("ServerAliveCountMax=3")})
    argv.insert(argv.end(), {"-o", opt});
  argv.insert(argv.end(), {"-T", spec.host, "--", remote_command(spec, o)});
  return argv;
}

}  // namespace

ProcessSpec ssh_process(const ProcessSpec& remote, const SshOptions& options) {
  if (remote.host.empty())
    throw Error(ErrorCode::kInvalidArgument, remote.label + ": no host to ssh to");
  ProcessSpec local;
  local.label = remote.label + "@" + remote.host;
  local.host = remote.host;
  local.argv = ssh_argv(remote, options);
  for (const auto& [k, v] : remote_environment(remote)) {
    if (v.find('\n') != std::string::npos || k.find('\n') != std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, remote.label + ": environment variable " + k +
                                                   " holds a newline; the ssh "
                                                   "launcher passes the environment as lines");
    local.stdin_data.append(k).append("=").append(v).append("\n");
  }
  local.stdin_data += "\n";
  local.relay = true;
  // A replicated server or a worker under --on-worker-loss continue: ssh ending with the remote
  // process's failure (or the host's loss) does not fail the job either.
  local.may_fail = remote.may_fail;
  return local;
}

std::string describe_ssh_job(const JobSpec& job, const SshOptions& options) {
  std::map<std::string, std::vector<const ProcessSpec*>> by_host;
  std::vector<std::string> order;
  for (const auto* group : {&job.services, &job.workers})
    for (const ProcessSpec& p : *group) {
      if (!by_host.count(p.host)) order.push_back(p.host);
      by_host[p.host].push_back(&p);
    }
  std::string out;
  for (const auto& host : order) {
    out += "host " + host + ":\n";
    for (const ProcessSpec* p : by_host[host]) {
      out += "  " + p->label + ":";
      for (const auto& a : ssh_argv(*p, options)) {
        out += ' ';
        out += shell_quote(a);
      }
      out += "\n    environment on stdin:";
      for (const auto& [k, v] : remote_environment(*p)) {
        out += ' ';
        out += k;
        out += '=';
        out += k == "PSRT_SECRET" ? "<secret: " + std::to_string(v.size()) + " characters>"
                                  : shell_quote(v);
      }
      out += "\n";
    }
  }
  return out;
}

int SshLauncher::run(const JobSpec& job) {
  JobSpec local = job;
  for (auto* group : {&local.services, &local.workers})
    for (ProcessSpec& p : *group)
      p = ssh_process(p, options_);
  return LocalLauncher().run(local);
}

}  // namespace psrt::launch
