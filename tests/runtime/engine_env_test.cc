// How each engine's environment maps to a psrt role (runtime/engine_env.h): exact roles, ranks,
// counts and scheduler addresses, and the errors malformed or contradictory variables give.
#include "runtime/engine_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "psrt/error.h"
#include "runtime/worker_ranks.h"

namespace {

using psrt::runtime::EngineJob;
using Vars = std::map<std::string, std::string>;

std::optional<EngineJob> job_of(const Vars& vars) {
  return psrt::runtime::engine_job_from(
      [&](const char* name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end() || it->second.empty()) return std::nullopt;
        return it->second;
      },
      psrt::runtime::slurm_hostnames);
}

std::string error_of(const Vars& vars) {
  try {
    job_of(vars);
  } catch (const psrt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_role(const std::optional<EngineJob>& j, const std::string& role, int rank) {
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->role, role);
  EXPECT_EQ(j->rank, rank);
}

TEST(EngineEnv, NoEngineOrAnExplicitRoleMeansNoDerivedJob) {
  EXPECT_FALSE(job_of({}).has_value());
  EXPECT_FALSE(job_of({{"PSRT_ROLE", "worker"}, {"OMPI_COMM_WORLD_RANK", "0"}}).has_value());
}

TEST(EngineEnv, OpenMpiRanksSplitIntoServersThenWorkers) {
  Vars v = {{"OMPI_COMM_WORLD_SIZE", "6"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
            {"PSRT_NUM_SERVERS", "2"},
            {"MASTER_ADDR", "node1"}};
  const std::pair<const char*, int> want[] = {{"server", 0}, {"server", 1}, {"worker", 0},
                                              {"worker", 1}, {"worker", 2}, {"worker", 3}};
  for (int g = 0; g < 6; ++g) {
    v["OMPI_COMM_WORLD_RANK"] = std::to_string(g);
    v["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(g % 3);
    auto j = job_of(v);
    expect_role(j, want[g].first, want[g].second);
    EXPECT_EQ(j->global_rank, g);
    EXPECT_EQ(j->num_servers, 2);
    EXPECT_EQ(j->num_workers, 4);
    EXPECT_EQ(j->hosts_scheduler, g == 0);
    EXPECT_EQ(j->scheduler, "node1:7450");
    EXPECT_EQ(j->local_rank, g % 3);
    EXPECT_EQ(j->local_size, 3);
    EXPECT_EQ(j->engine, "OMPI_COMM_WORLD_RANK");
  }
}

TEST(EngineEnv, OpenMpiOnOneHostNeedsNoSchedulerHost) {
  auto j = job_of({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"PSRT_SCHEDULER_PORT", "9000"}});
  expect_role(j, "worker", 0);
  EXPECT_EQ(j->scheduler, "127.0.0.1:9000");
  EXPECT_EQ(error_of({{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}),
            "OMPI_COMM_WORLD_RANK is set, but OpenMPI does not say where rank 0 (the scheduler's "
            "host) runs: pass it with `mpirun -x PSRT_SCHEDULER_HOST=HOST` (or MASTER_ADDR), or "
            "use psrun --launcher mpi");
}

TEST(EngineEnv, AGivenSchedulerMeansNoRankHostsOne) {
  auto j = job_of({{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "3"},
                   {"PSRT_SCHEDULER", "10.0.0.1:4000"}});
  expect_role(j, "server", 0);
  EXPECT_FALSE(j->hosts_scheduler);
  EXPECT_EQ(j->scheduler, "10.0.0.1:4000");
}

TEST(EngineEnv, TorchStyleRankWorldSizeAndMaster) {
  Vars v = {{"RANK", "3"},
            {"WORLD_SIZE", "4"},
            {"MASTER_ADDR", "psrt-0.psrt"},
            {"MASTER_PORT", "29500"},
            {"LOCAL_RANK", "1"},
            {"LOCAL_WORLD_SIZE", "2"}};
  auto j = job_of(v);
  expect_role(j, "worker", 2);
  EXPECT_EQ(j->num_servers, 1);
  EXPECT_EQ(j->num_workers, 3);
  EXPECT_EQ(j->scheduler, "psrt-0.psrt:29500");
  EXPECT_EQ(j->local_rank, 1);
  EXPECT_EQ(j->local_size, 2);
  v["PSRT_SCHEDULER_PORT"] = "7000";
  EXPECT_EQ(job_of(v)->scheduler, "psrt-0.psrt:7000");
  v["MASTER_ADDR"] = "fd00::1";
  EXPECT_EQ(job_of(v)->scheduler, "[fd00::1]:7000");
}

TEST(EngineEnv, TfConfigPsAreServersChiefAndWorkersAreWorkers) {
  const std::string cluster =
      R"({"cluster": {"ps": ["ps0:2222", "ps1:2222"], "chief": ["c0:2222"],
                      "worker": ["w0:2222", "w1:2222"]}, )";
  const std::tuple<const char*, int, const char*, int, int> cases[] = {
      {"ps", 0, "server", 0, 0},
      {"ps", 1, "server", 1, 1},
      {"chief", 0, "worker", 0, 2},
      {"worker", 0, "worker", 1, 3},
      {"worker", 1, "worker", 2, 4}};
  for (const auto& [type, index, role, rank, global] : cases) {
    auto j = job_of({{"TF_CONFIG", cluster + R"("task": {"type": ")" + type + R"(", "index": )" +
                                       std::to_string(index) + "}}"}});
    expect_role(j, role, rank);
    EXPECT_EQ(j->global_rank, global);
    EXPECT_EQ(j->num_servers, 2);
    EXPECT_EQ(j->num_workers, 3);
    EXPECT_EQ(j->scheduler, "ps0:2222");
    EXPECT_EQ(j->hosts_scheduler, global == 0);
  }
}

TEST(EngineEnv, SlurmUsesTheStepsFirstNodeNotTheLaunchNode) {
  Vars v = {{"SLURM_PROCID", "5"},
            {"SLURM_NTASKS", "6"},
            {"SLURM_LOCALID", "1"},
            {"SLURM_NODEID", "2"},
            {"SLURM_STEP_TASKS_PER_NODE", "2(x2),3"},
            {"SLURM_STEP_NODELIST", "gpu7,gpu8,gpu9"},
            {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"},
            {"PSRT_NUM_SERVERS", "2"}};
  auto j = job_of(v);
  expect_role(j, "worker", 3);
  EXPECT_EQ(j->scheduler, "gpu7:7450");
  EXPECT_EQ(j->local_rank, 1);
  EXPECT_EQ(j->local_size, 3);
  v["SLURM_NODEID"] = "1";
  EXPECT_EQ(job_of(v)->local_size, 2);
}

TEST(EngineEnv, SlurmBracketListsExpandThroughScontrol) {
  if (::access("/usr/bin/scontrol", X_OK) != 0) GTEST_SKIP() << "no scontrol (slurm-wlm)";
  // scontrol reads a slurm.conf even to expand a list; inside an allocation the cluster's is there.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("psrt_engine_env_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Remove {
    std::filesystem::path dir;
    ~Remove() { std::filesystem::remove_all(dir); }
  } remove{dir};
  std::ofstream(dir / "slurm.conf") << "ClusterName=t\nSlurmctldHost=localhost\n"
                                       "NodeName=localhost CPUs=1 State=UNKNOWN\n";
  ::setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
  EXPECT_EQ(psrt::runtime::slurm_hostnames("n[01-03],gpu7"),
            (std::vector<std::string>{"n01", "n02", "n03", "gpu7"}));
  auto j =
      job_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "node[4-5]"}});
  expect_role(j, "server", 0);
  EXPECT_EQ(j->scheduler, "node4:7450");
  EXPECT_EQ(
      error_of(
          {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "node[4-5];rm"}}),
      "SLURM_STEP_NODELIST='node[4-5];rm' is not a Slurm host list");
  ::unsetenv("SLURM_CONF");
}

TEST(EngineEnv, TheInnermostEngineWins) {
  // mpirun inside a Slurm allocation: OpenMPI's ranks, not the batch script's SLURM_PROCID.
  auto j = job_of({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "1"},
                   {"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "3"},
                   {"MASTER_ADDR", "a"}});
  expect_role(j, "worker", 1);
  EXPECT_EQ(j->engine, "OMPI_COMM_WORLD_RANK");
}

TEST(EngineEnv, EngineRolesExportedForTheProcess) {
  // 6 processes, 3 per host, 2 servers: host 0 runs servers 0, 1 and worker 0 (global 2), host
  // 1 workers 1..3. A worker's local rank and size count the workers on its host only, and it
  // gets torchrun's variables too; a server keeps the engine's.
  EngineJob j;
  j.role = "worker";
  j.global_rank = 2;
  j.rank = 0;
  j.num_servers = 2;
  j.num_workers = 4;
  j.scheduler = "h:1";
  j.local_rank = 2;
  j.local_size = 3;
  using Env = std::vector<std::pair<std::string, std::string>>;
  Env want = {{"PSRT_ROLE", "worker"},   {"PSRT_RANK", "0"},        {"PSRT_NUM_SERVERS", "2"},
              {"PSRT_NUM_WORKERS", "4"}, {"PSRT_SCHEDULER", "h:1"}, {"RANK", "0"},
              {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "0"},       {"LOCAL_WORLD_SIZE", "1"},
              {"PSRT_LOCAL_RANK", "0"},  {"PSRT_LOCAL_SIZE", "1"}};
  EXPECT_EQ(psrt::runtime::engine_job_env(j), want);
  j.global_rank = 4;  // worker 2, the second on host 1
  j.rank = 2;
  j.local_rank = 1;
  want = {{"PSRT_ROLE", "worker"},   {"PSRT_RANK", "2"},        {"PSRT_NUM_SERVERS", "2"},
          {"PSRT_NUM_WORKERS", "4"}, {"PSRT_SCHEDULER", "h:1"}, {"RANK", "2"},
          {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "1"},       {"LOCAL_WORLD_SIZE", "3"},
          {"PSRT_LOCAL_RANK", "1"},  {"PSRT_LOCAL_SIZE", "3"}};
  EXPECT_EQ(psrt::runtime::engine_job_env(j), want);
  j.role = "server";
  j.global_rank = 1;
  j.rank = 1;
  j.local_rank = 1;
  want = {{"PSRT_ROLE", "server"},   {"PSRT_RANK", "1"},        {"PSRT_NUM_SERVERS", "2"},
          {"PSRT_NUM_WORKERS", "4"}, {"PSRT_SCHEDULER", "h:1"}, {"PSRT_LOCAL_RANK", "1"},
          {"PSRT_LOCAL_SIZE", "3"}};
  EXPECT_EQ(psrt::runtime::engine_job_env(j), want);
}

TEST(WorkerRanks, LocalRanksCountWorkersPerHostInRankOrder) {
  const auto l = psrt::runtime::local_ranks({"a", "b", "a", "a", "b"});
  ASSERT_EQ(l.size(), 5u);
  const int rank[] = {0, 0, 1, 2, 1}, size[] = {3, 2, 3, 3, 2};
  for (std::size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].rank, rank[i]) << i;
    EXPECT_EQ(l[i].size, size[i]) << i;
  }
}

TEST(EngineEnv, MalformedOrContradictoryVariablesAreNamedWithTheFix) {
  const std::pair<Vars, std::string> cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "1"}},
       "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: start the job with mpirun "
       "(OpenMPI sets it)"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}},
       "RANK='x' is not an integer in [0, 1048576]: set RANK and WORLD_SIZE as PyTorchJob and "
       "torchrun do"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}},
       "RANK=2 is not below WORLD_SIZE=2: the engine's rank and world size disagree"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}},
       "RANK is set but MASTER_ADDR is not: set MASTER_ADDR to the host of rank 0 (it hosts the "
       "psrt scheduler), as PyTorchJob and torchrun do"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"PSRT_NUM_SERVERS", "2"}},
       "RANK gives 2 processes, which leaves no worker with 2 servers: start more processes or "
       "lower PSRT_NUM_SERVERS"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"}, {"PSRT_NUM_WORKERS", "2"}},
       "PSRT_NUM_WORKERS=2 contradicts RANK: its 4 processes less 1 servers are 3 workers; unset "
       "PSRT_NUM_WORKERS or fix the counts"},
      {{{"TF_CONFIG", "{not json"}}, "TF_CONFIG is not JSON"},
      {{{"TF_CONFIG",
         R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})"}},
       "TF_CONFIG has no ps task: psrt's servers are the ps tasks, add at least one (TFJob: a PS "
       "replica)"},
      {{{"TF_CONFIG",
         R"({"cluster": {"ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 1}})"}},
       "TF_CONFIG task index 1 is outside cluster.worker (1 tasks)"},
      {{{"TF_CONFIG",
         R"({"cluster": {"ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})"},
        {"PSRT_NUM_SERVERS", "2"}},
       "PSRT_NUM_SERVERS=2 contradicts TF_CONFIG's 1 ps tasks: unset PSRT_NUM_SERVERS (the ps "
       "tasks are the servers)"},
      {{{"TF_CONFIG",
         R"({"cluster": {"ps": ["p"], "worker": ["w:1"]}, "task": {"type": "ps", "index": 0}})"}},
       "TF_CONFIG: 'p' in cluster.ps[0] is not HOST:PORT"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}},
       "SLURM_PROCID is set but SLURM_STEP_NODELIST is not: start the processes with srun (not "
       "in the batch script itself), or set PSRT_SCHEDULER_HOST"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_STEP_NODELIST", "a"},
        {"SLURM_STEP_TASKS_PER_NODE", "2(x"}},
       "SLURM_STEP_TASKS_PER_NODE='2(x' is malformed: Slurm sets it as COUNT[(xREPEAT)],..."},
  };
  for (const auto& [vars, want] : cases) {
    const std::string got = error_of(vars);
    EXPECT_EQ(got.substr(0, want.size()), want) << got;
  }
}

}  // namespace
