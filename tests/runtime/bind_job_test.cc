// psrun binds the processes of a local job where its placement table says (runtime/placement/,
// tools/psrun/bind.h): real psrun, real worker and server processes, their affinity read from
// /proc/<pid>/status. The expected CPUs come from this machine's hwloc topology.
#define PSRT_SCRATCH_PREFIX "psrt_bind_test_"
#include <sched.h>

#include <set>

#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"
#include "tests/integration/job_runner.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

// A worker that prints its own CPUs, those of the server of its job (found by the job's secret
// in /proc/*/environ) and PSRT_GPU.
const std::string kWorker =
    "sh -c 'echo \"mine $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"; "
    "echo \"gpu ${PSRT_GPU-unset}\"; "
    "for p in /proc/[0-9]*; do "
    "  if tr \"\\0\" \"\\n\" 2>/dev/null < $p/environ | grep -qx \"PSRT_SECRET=$PSRT_SECRET\" && "
    "     tr \"\\0\" \"\\n\" 2>/dev/null < $p/environ | grep -qx PSRT_ROLE=server; then "
    "    echo \"server $(grep Cpus_allowed_list $p/status | cut -f2)\"; fi; done'";

std::string my_cpus() {
  cpu_set_t set;
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return placement::cpu_list(cpus);
}

placement::Plan expected(int workers, int servers, placement::Bind bind) {
  return placement::place(placement::read_topology(), {workers, servers, bind, std::nullopt});
}

TEST(Bind, CoreGivesWorkerAndServerTheirOwnCores) {
  const auto plan = expected(1, 1, placement::Bind::kCore);
  const std::string server = placement::cpu_list(plan.places[0].cpus);
  const std::string worker = placement::cpu_list(plan.places[1].cpus);
  const psrt::test::Run r =
      run_psrun_bounded("", "--transport tcp -n 1 -s 1 --bind core", kWorker, 60s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("placement (bind core):\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] mine " + worker + "\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] server " + server + "\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] gpu unset\n"), 1) << r.out;  // no GPU: no PSRT_GPU
  // With two cores or more, neither shares a core with the other.
  if (placement::read_topology().cores() >= 2) {
    std::set<int> w(plan.places[1].cpus.begin(), plan.places[1].cpus.end());
    for (int c : plan.places[0].cpus)
      EXPECT_EQ(w.count(c), 0u) << c;
  }
}

TEST(Bind, NoneLeavesTheInheritedCpus) {
  const psrt::test::Run r =
      run_psrun_bounded("", "--transport tcp -n 1 -s 1 --bind none", kWorker, 60s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("placement (bind none):\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] mine " + my_cpus() + "\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] server " + my_cpus() + "\n"), 1) << r.out;
}

TEST(Bind, EnvChoosesNuma) {
  const auto plan = expected(1, 1, placement::Bind::kNuma);
  const psrt::test::Run r =
      run_psrun_bounded("PSRT_BIND=numa", "--transport tcp -n 1 -s 1", kWorker, 60s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("placement (bind numa):\n"), 1) << r.out;
  EXPECT_EQ(r.count("[worker 0] mine " + placement::cpu_list(plan.places[1].cpus) + "\n"), 1)
      << r.out;
}

// psrun planning with the synthetic 2-socket, 8-GPU, 4-NIC node (HWLOC_XMLFILE) instead of this
// machine's topology.
const std::string kSyntheticNode = "HWLOC_XMLFILE=" PSRT_TOPOLOGY_DIR "/two_socket_8gpu_4nic.xml";

TEST(Bind, EachWorkerGetsItsGpuFromTheTopology) {
  const psrt::test::Run r =
      run_psrun_bounded(kSyntheticNode, "--transport tcp -n 3 -s 1 --bind none",
                        "sh -c 'echo \"gpu=${PSRT_GPU-unset} nic=${UCX_NET_DEVICES-unset}\"'", 60s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("placement (bind none):\n"
                    "  host         role    rank  cores            NUMA  GPU          NIC\n"),
            1)
      << r.out;
  EXPECT_EQ(r.count(" server     0  -                -     -            mlx5_2\n"), 1) << r.out;
  EXPECT_EQ(r.count(" worker     0  -                -     cuda:0=cuda0 mlx5_1\n"), 1) << r.out;
  EXPECT_EQ(r.count(" worker     2  -                -     cuda:2=cuda2 mlx5_0\n"), 1) << r.out;
  // A tcp job: PSRT_GPU per worker, no UCX_NET_DEVICES.
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(
        r.count("[worker " + std::to_string(w) + "] gpu=" + std::to_string(w) + " nic=unset\n"), 1)
        << r.out;
  // CUDA_VISIBLE_DEVICES renumbers: the worker's cuda:0 is the node's cuda5.
  const psrt::test::Run v = run_psrun_bounded(kSyntheticNode + " CUDA_VISIBLE_DEVICES=5",
                                              "--transport tcp -n 1 -s 1 --bind none",
                                              "sh -c 'echo \"gpu=$PSRT_GPU\"'", 60s);
  ASSERT_EQ(v.rc, 0) << v.out;
  EXPECT_EQ(v.count(" worker     0  -                -     cuda:0=cuda5 mlx5_2\n"), 1) << v.out;
  EXPECT_EQ(v.count("[worker 0] gpu=0\n"), 1) << v.out;
}

// Under an engine (mpirun here, by its variables; srun and Kubernetes alike) `psrun
// --role-from-env` gives a worker its GPU by its rank among the workers on its host: global
// rank 3 of 4 with one server on the host is the third worker there, cuda:2.
TEST(Bind, EngineWorkerGetsItsGpuCountingWorkersOnly) {
  const std::string engine =
      kSyntheticNode +
      " OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=3 "
      "OMPI_COMM_WORLD_LOCAL_SIZE=4 PSRT_NUM_SERVERS=1 PSRT_SCHEDULER=127.0.0.1:1 "
      "PSRT_SECRET=0123456789abcdef0123456789abcdef";
  const std::string print = "sh -c 'echo \"gpu=${PSRT_GPU-unset} local=$PSRT_LOCAL_RANK\"'";
  const psrt::test::Run r = run_psrun_bounded(engine, "--role-from-env", print, 60s);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("] gpu=2 local=2\n"), 1) << r.out;
  // A PSRT_GPU the engine passes stays; a server gets none.
  const psrt::test::Run kept =
      run_psrun_bounded(engine + " PSRT_GPU=7", "--role-from-env", print, 60s);
  EXPECT_EQ(kept.count("] gpu=7 local=2\n"), 1) << kept.out;
}

TEST(Bind, CpusThisHostLacksFailNamingThem) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (CPU_ISSET(31, &mine)) GTEST_SKIP() << "this host has the synthetic node's CPUs";
  const psrt::test::Run r =
      run_psrun_bounded(kSyntheticNode, "--transport tcp -n 2 -s 1 --bind core", "true", 60s);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrun: server 0: cannot start '" PSRUN_PATH "': binding it to CPUs "
                    "8,9,10,11,12,13,14,15,24,25,26,27,28,29,30,31 failed: sched_setaffinity: "
                    "Invalid argument (CPUs this host lacks or psrun may not use; psrun --bind "
                    "none leaves processes unbound)\n"),
            1)
      << r.out;
}

TEST(Bind, BadModesAndOtherLaunchersFail) {
  psrt::test::Run r = run_psrun_bounded("PSRT_BIND=socket", "--transport tcp", "true", 30s);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrun: PSRT_BIND=socket: use none, numa or core\n"), 1) << r.out;
  r = run_psrun_bounded("", "--transport tcp --bind core --launcher mpi", "true", 30s);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrun: --bind places the processes psrun starts (--launcher local or ssh); "
                    "with --launcher mpi the engine binds them"),
            1)
      << r.out;
  r = run_psrun_bounded("", "--transport tcp --bind socket", "true", 30s);
  EXPECT_EQ(r.rc, 105) << r.out;  // CLI11's ValidationError
  EXPECT_EQ(r.count("--bind: socket not in {none,numa,core}"), 1) << r.out;
}

}  // namespace
}  // namespace psrt::test
