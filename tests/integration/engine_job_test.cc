// Jobs whose processes an engine would start: each process gets only that engine's variables
// (and the job secret), never PSRT_ROLE, runs `psrun --role-from-env -- ps_worker ...`, finds its
// role, and the job ends with the workers' exact closed-form sums (runtime/engine_env.h).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_engine_job_test_"
#include "tests/integration/job_runner.h"

namespace {

using psrt::test::free_port;
using psrt::test::ProcessGroup;
using psrt::test::Run;

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef-engine-job";
constexpr const char* kWorker = " exact --rounds 3 --sizes 1,7,1000,4099";

// Starts one process per entry of `envs` (each under `env -i`: only PATH, the secret, PSRT_LR=1
// and the entry), waits for all; the job's output and a non-zero rc when any failed.
Run run_engine_job(const std::vector<std::string>& envs) {
  std::string script = "(rc=0; pids=;";
  for (const auto& e : envs)
    script += std::string(" env -i PATH=/usr/bin:/bin PSRT_SECRET=") + kSecret + " PSRT_LR=1 " + e +
              " " PSRUN_PATH " --role-from-env -- " PS_WORKER_PATH + kWorker +
              " & pids=\"$pids $!\";";
  script += " for p in $pids; do wait $p || rc=1; done; exit $rc)";
  ProcessGroup job(script, psrt::test::scratch("out.txt"));
  Run r;
  r.rc = job.wait(std::chrono::seconds(60));
  if (r.rc < 0) {
    r.rc = job.kill();
    ADD_FAILURE() << "the engine job did not end within 60 s";
  }
  r.out = job.out();
  return r;
}

TEST(EngineJob, OpenMpiVariablesAlone) {
  const int port = free_port();
  std::vector<std::string> envs;
  for (int g = 0; g < 5; ++g)
    envs.push_back("OMPI_COMM_WORLD_RANK=" + std::to_string(g) + " OMPI_COMM_WORLD_SIZE=5 " +
                   "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(g) +
                   " OMPI_COMM_WORLD_LOCAL_SIZE=5 PSRT_NUM_SERVERS=2 PSRT_SCHEDULER_PORT=" +
                   std::to_string(port));
  auto r = run_engine_job(envs);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  EXPECT_EQ(r.count("OMPI_COMM_WORLD_RANK: global rank 4 of 5 is worker 2 (local 4/5)"), 1)
      << r.out;
  EXPECT_EQ(r.count("rendezvous complete: 2 servers, 3 workers"), 1) << r.out;
}

TEST(EngineJob, TorchRankWorldSizeMasterVariablesAlone) {
  const int port = free_port();
  std::vector<std::string> envs;
  for (int g = 0; g < 4; ++g)
    envs.push_back("RANK=" + std::to_string(g) + " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(g) +
                   " LOCAL_WORLD_SIZE=4 MASTER_ADDR=localhost " +
                   "MASTER_PORT=" + std::to_string(port));
  auto r = run_engine_job(envs);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  EXPECT_EQ(r.count("rendezvous complete: 1 servers, 3 workers"), 1) << r.out;
}

TEST(EngineJob, TfConfigAlone) {
  const std::string ps0 = "127.0.0.1:" + std::to_string(free_port());
  const std::string cluster =
      R"({"cluster":{"ps":[")" + ps0 +
      R"(","127.0.0.1:1"],"chief":["127.0.0.1:2"],"worker":["127.0.0.1:3","127.0.0.1:4"]},)"
      R"("task":{"type":")";
  std::vector<std::string> envs;
  for (const auto& [type, index] : std::vector<std::pair<std::string, int>>{
           {"ps", 0}, {"ps", 1}, {"chief", 0}, {"worker", 0}, {"worker", 1}})
    // One task per pod: servers listen where PSRT_HOST says (the pod's IP in a TFJob).
    envs.push_back(std::string("PSRT_HOST=127.0.0.1 TF_CONFIG='")
                       .append(cluster)
                       .append(type)
                       .append(R"(","index":)")
                       .append(std::to_string(index))
                       .append("}}'"));
  auto r = run_engine_job(envs);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  EXPECT_EQ(r.count("TF_CONFIG: global rank 2 of 5 is worker 0"), 1) << r.out;
  EXPECT_EQ(r.count("rendezvous complete: 2 servers, 3 workers"), 1) << r.out;
}

TEST(EngineJob, SlurmVariablesAlone) {
  const int port = free_port();
  std::vector<std::string> envs;
  for (int g = 0; g < 4; ++g)
    envs.push_back("SLURM_PROCID=" + std::to_string(g) + " SLURM_NTASKS=4 SLURM_LOCALID=" +
                   std::to_string(g) + " SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=4 " +
                   "SLURM_STEP_NODELIST=localhost SLURM_LAUNCH_NODE_IPADDR=192.0.2.1 " +
                   "PSRT_SCHEDULER_PORT=" + std::to_string(port));
  auto r = run_engine_job(envs);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  EXPECT_EQ(r.count("scheduler localhost:" + std::to_string(port)), 4) << r.out;
}

TEST(EngineJob, BadEngineVariablesFailNamingThem) {
  auto r = run_engine_job({"RANK=1 WORLD_SIZE=4"});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrt: RANK is set but MASTER_ADDR is not"), 1) << r.out;
  // A job over several hosts (local size 1 of 2) whose server would listen on loopback.
  auto l = run_engine_job({"RANK=0 WORLD_SIZE=2 MASTER_ADDR=localhost"});
  EXPECT_EQ(l.rc, 1) << l.out;
  EXPECT_EQ(l.count("psrt: this server would listen on 127.0.0.1 (the route to the scheduler at "
                    "localhost:7450), which the job's other hosts cannot reach: set "
                    "PSRT_INTERFACE"),
            1)
      << l.out;
  // A bare worker program on the rank that hosts the scheduler is told to use --role-from-env.
  ProcessGroup bare("env -i RANK=0 WORLD_SIZE=2 MASTER_ADDR=localhost PSRT_SECRET=" +
                        std::string(kSecret) + " " PS_WORKER_PATH + kWorker,
                    psrt::test::scratch("bare.txt"));
  EXPECT_EQ(bare.wait(std::chrono::seconds(20)), 1);
  EXPECT_EQ(psrt::test::count(bare.out(),
                              "RANK: global rank 0 is a server and hosts the "
                              "scheduler in this job, not a plain worker: start "
                              "every rank as `psrun --role-from-env -- PROGRAM`"),
            1)
      << bare.out();
}

}  // namespace
