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

TEST(Bind, BadModesAndOtherLaunchersFail) {
  psrt::test::Run r = run_psrun_bounded("PSRT_BIND=socket", "--transport tcp", "true", 30s);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrun: PSRT_BIND=socket: use none, numa or core\n"), 1) << r.out;
  r = run_psrun_bounded("", "--transport tcp --bind core --launcher mpi", "true", 30s);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("psrun: --bind places the processes of a local job (--launcher local); with "
                    "--launcher mpi the engine binds them"),
            1)
      << r.out;
  r = run_psrun_bounded("", "--transport tcp --bind socket", "true", 30s);
  EXPECT_EQ(r.rc, 105) << r.out;  // CLI11's ValidationError
  EXPECT_EQ(r.count("--bind: socket not in {none,numa,core}"), 1) << r.out;
}

}  // namespace
}  // namespace psrt::test
