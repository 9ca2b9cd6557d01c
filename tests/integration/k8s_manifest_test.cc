// deploy/k8s/psrt-indexed-job.yaml: the environment each pod gets (rendered by k8s_pod_env.py
// with Debian's python3-yaml, as Kubernetes would set it) maps through runtime/engine_env to the
// right roles, and the same pods' environment, with this host's addresses, runs an exact job.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_k8s_manifest_test_"
#include "runtime/engine_env.h"
#include "tests/integration/job_runner.h"

namespace {

using psrt::test::free_port;

struct Pod {
  std::map<std::string, std::string> env;
  std::string argv;
};

struct Rendered {
  std::vector<Pod> pods;
  std::map<std::string, std::string> facts;  // SECRET, SERVICE_PORT, HOSTNAME_0
};

Rendered render() {
  const std::string cmd = "/usr/bin/python3 " K8S_POD_ENV " " K8S_MANIFEST " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  Rendered r;
  Pod pod;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      r.pods.push_back(pod);
      pod = {};
    } else if (line.rfind("ARGV ", 0) == 0) {
      pod.argv = line.substr(5);
    } else if (auto eq = line.find('='); eq != std::string::npos) {
      pod.env[line.substr(0, eq)] = line.substr(eq + 1);
    } else if (auto sp = line.find(' '); sp != std::string::npos) {
      r.facts[line.substr(0, sp)] = line.substr(sp + 1);
    }
  }
  return r;
}

std::optional<psrt::runtime::EngineJob> job_of(const Pod& pod) {
  return psrt::runtime::engine_job_from(
      [&](const char* name) -> std::optional<std::string> {
        auto it = pod.env.find(name);
        if (it == pod.env.end() || it->second.empty()) return std::nullopt;
        return it->second;
      },
      psrt::runtime::slurm_hostnames);
}

bool have_yaml() {
  return std::system("/usr/bin/python3 -c 'import yaml' > /dev/null 2>&1") == 0;
}

TEST(K8sManifest, EveryPodMapsToItsRole) {
  if (!have_yaml()) GTEST_SKIP() << "needs /usr/bin/python3 with python3-yaml";
  const Rendered r = render();
  ASSERT_EQ(r.pods.size(), 4u);
  const std::string scheduler = r.facts.at("HOSTNAME_0") + ":" + r.facts.at("SERVICE_PORT");
  EXPECT_EQ(scheduler, "psrt-0.psrt:7450");
  for (std::size_t i = 0; i < r.pods.size(); ++i) {
    EXPECT_EQ(r.pods[i].argv.rfind("psrun --role-from-env -- ", 0), 0u) << r.pods[i].argv;
    auto job = job_of(r.pods[i]);
    ASSERT_TRUE(job.has_value()) << "pod " << i;
    EXPECT_EQ(job->engine, "RANK");
    EXPECT_EQ(job->global_rank, static_cast<int>(i));
    EXPECT_EQ(job->role, i == 0 ? "server" : "worker");
    EXPECT_EQ(job->rank, i == 0 ? 0 : static_cast<int>(i) - 1);
    EXPECT_EQ(job->hosts_scheduler, i == 0);
    EXPECT_EQ(job->num_servers, 1);
    EXPECT_EQ(job->num_workers, 3);
    EXPECT_EQ(job->scheduler, scheduler) << "every pod reaches pod 0 through the Service";
  }
}

TEST(K8sManifest, ThePodsEnvironmentRunsAnExactJob) {
  if (!have_yaml()) GTEST_SKIP() << "needs /usr/bin/python3 with python3-yaml";
  const Rendered r = render();
  ASSERT_EQ(r.pods.size(), 4u);
  // The Secret's value in a private file where the pods mount it; this host's addresses.
  const auto secret = psrt::test::scratch("secret");
  std::ofstream(secret) << r.facts.at("SECRET") << "\n";
  ::chmod(secret.c_str(), 0600);
  const std::string port = std::to_string(free_port());
  std::string script = "(rc=0; pids=;";
  for (const Pod& pod : r.pods) {
    std::string env = "env -i PATH=/usr/bin:/bin PSRT_LR=1";
    for (auto [k, v] : pod.env) {
      if (k == "MASTER_ADDR" || k == "PSRT_HOST") v = "127.0.0.1";
      if (k == "PSRT_SCHEDULER_PORT") v = port;
      if (k == "PSRT_SECRET_FILE") v = secret.string();
      env.append(" ").append(k).append("=").append(v);
    }
    script += " " + env +
              " " PSRUN_PATH " --role-from-env -- " PS_WORKER_PATH
              " exact --rounds 3 --sizes 1,7,1000 & pids=\"$pids $!\";";
  }
  script += " for p in $pids; do wait $p || rc=1; done; exit $rc)";
  psrt::test::ProcessGroup job(script, psrt::test::scratch("out.txt"));
  int rc = job.wait(std::chrono::seconds(60));
  if (rc < 0) {
    rc = job.kill();
    ADD_FAILURE() << "the job did not end within 60 s";
  }
  const std::string out = job.out();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(psrt::test::count(out, "PASS exact"), 3) << out;
}

}  // namespace
