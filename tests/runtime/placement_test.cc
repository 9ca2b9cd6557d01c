// Placement on a synthetic 2-socket node with 8 GPUs and 4 NICs (topologies/*.xml, loaded with
// hwloc_topology_set_xml): the exact cores, NUMA node, GPU and NIC of every process; and this
// machine's real topology read through hwloc.
#include "runtime/placement/placement.h"

#include <gtest/gtest.h>
#include <sched.h>

#include "psrt/error.h"
#include "runtime/placement/topology.h"

namespace psrt::placement {
namespace {

const Topology& node() {
  static const Topology t = read_topology(PSRT_TOPOLOGY_DIR "/two_socket_8gpu_4nic.xml");
  return t;
}

struct Expect {
  std::string role;
  int rank;
  std::string cpus;
  int numa;
  std::optional<int> gpu;
  std::string gpu_name, nic;
};

void expect_plan(const Plan& plan, const std::vector<Expect>& want) {
  ASSERT_EQ(plan.places.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Place& p = plan.places[i];
    const Expect& w = want[i];
    SCOPED_TRACE(w.role + " " + std::to_string(w.rank));
    EXPECT_EQ(p.role, w.role);
    EXPECT_EQ(p.rank, w.rank);
    EXPECT_EQ(cpu_list(p.cpus), w.cpus);
    EXPECT_EQ(p.numa, w.numa);
    EXPECT_EQ(p.gpu, w.gpu);
    EXPECT_EQ(p.gpu_name, w.gpu_name);
    EXPECT_EQ(p.nic, w.nic);
  }
}

TEST(Topology, SyntheticNodeAsWritten) {
  const Topology& t = node();
  ASSERT_EQ(t.numa.size(), 2u);
  EXPECT_EQ(t.numa[0].os_index, 0);
  EXPECT_EQ(t.numa[1].os_index, 1);
  ASSERT_EQ(t.numa[0].cores.size(), 8u);
  EXPECT_EQ(t.numa[0].cores[3], (std::vector<int>{3, 19}));
  EXPECT_EQ(t.numa[1].cores[0], (std::vector<int>{8, 24}));
  EXPECT_EQ(t.cores(), 16);
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(t.gpus[static_cast<std::size_t>(i)].name, "cuda" + std::to_string(i));
    EXPECT_EQ(t.gpus[static_cast<std::size_t>(i)].numa, i / 4);
  }
  EXPECT_EQ(t.gpus[2].busid, "0000:23:00.0");
  ASSERT_EQ(t.nics.size(), 4u);
  EXPECT_EQ(t.nics[0].name, "mlx5_0");
  EXPECT_EQ(t.nics[0].busid, "0000:25:00.0");
  EXPECT_EQ(t.nics[0].numa, 0);
  EXPECT_EQ(t.nics[3].numa, 1);
  // Same PCIe switch > same socket > across sockets.
  EXPECT_GT(nearness(t.gpus[0], t.nics[1]), nearness(t.gpus[0], t.nics[0]));
  EXPECT_GT(nearness(t.gpus[0], t.nics[0]), nearness(t.gpus[0], t.nics[2]));
}

TEST(Placement, EightWorkersTwoServersByDefault) {
  const Plan plan = place(node(), {8, 2, Bind::kAuto, std::nullopt});
  EXPECT_EQ(plan.bind, Bind::kCore);  // 16 cores for 10 processes
  expect_plan(plan, {
                        {"server", 0, "7,23", 0, std::nullopt, "", "mlx5_0"},
                        {"server", 1, "15,31", 1, std::nullopt, "", "mlx5_2"},
                        {"worker", 0, "0-1,16-17", 0, 0, "cuda0", "mlx5_1"},
                        {"worker", 1, "2-3,18-19", 0, 1, "cuda1", "mlx5_1"},
                        {"worker", 2, "4-5,20-21", 0, 2, "cuda2", "mlx5_0"},
                        {"worker", 3, "6,22", 0, 3, "cuda3", "mlx5_0"},
                        {"worker", 4, "8-9,24-25", 1, 4, "cuda4", "mlx5_2"},
                        {"worker", 5, "10-11,26-27", 1, 5, "cuda5", "mlx5_2"},
                        {"worker", 6, "12-13,28-29", 1, 6, "cuda6", "mlx5_3"},
                        {"worker", 7, "14,30", 1, 7, "cuda7", "mlx5_3"},
                    });
}

TEST(Placement, CudaVisibleDevicesRespected) {
  // The process numbering restarts at 0: its cuda:0 is the node's cuda4, on socket 1.
  const Plan plan = place(node(), {4, 1, Bind::kCore, "4,5,6,7"});
  expect_plan(plan, {
                        {"server", 0, "0-7,16-23", 0, std::nullopt, "", "mlx5_0"},
                        {"worker", 0, "8-9,24-25", 1, 0, "cuda4", "mlx5_2"},
                        {"worker", 1, "10-11,26-27", 1, 1, "cuda5", "mlx5_2"},
                        {"worker", 2, "12-13,28-29", 1, 2, "cuda6", "mlx5_3"},
                        {"worker", 3, "14-15,30-31", 1, 3, "cuda7", "mlx5_3"},
                    });
  // Two visible GPUs for three workers: local rank 2 shares the first.
  const Plan shared = place(node(), {3, 1, Bind::kNone, "6,1"});
  expect_plan(shared, {
                          {"server", 0, "", -1, std::nullopt, "", "mlx5_0"},
                          {"worker", 0, "", -1, 0, "cuda6", "mlx5_3"},
                          {"worker", 1, "", -1, 1, "cuda1", "mlx5_1"},
                          {"worker", 2, "", -1, 0, "cuda6", "mlx5_3"},
                      });
  // Hidden GPUs (empty), and GPUs named by UUID that hwloc cannot map.
  const Plan none = place(node(), {2, 1, Bind::kNuma, ""});
  EXPECT_FALSE(none.places[1].gpu);
  const Plan uuid = place(node(), {1, 1, Bind::kNuma, "GPU-8f6a"});
  EXPECT_EQ(uuid.places[1].gpu, 0);
  EXPECT_EQ(uuid.places[1].gpu_name, "");
}

TEST(Placement, NumaBindingAndOversubscription) {
  const Plan plan = place(node(), {2, 1, Bind::kNuma, std::nullopt});
  expect_plan(plan, {
                        {"server", 0, "8-15,24-31", 1, std::nullopt, "", "mlx5_2"},
                        {"worker", 0, "0-7,16-23", 0, 0, "cuda0", "mlx5_1"},
                        {"worker", 1, "0-7,16-23", 0, 1, "cuda1", "mlx5_1"},
                    });
  // More processes than cores: auto binds to NUMA nodes.
  const Plan many = place(node(), {16, 2, Bind::kAuto, std::nullopt});
  EXPECT_EQ(many.bind, Bind::kNuma);
  EXPECT_EQ(cpu_list(many.places[2 + 9].cpus), "0-7,16-23");  // worker 9: cuda1, socket 0
  EXPECT_EQ(many.places[2 + 9].gpu, 1);
}

TEST(Placement, TableAndAffinity) {
  const Plan plan = place(node(), {2, 1, Bind::kCore, std::nullopt});
  EXPECT_EQ(format_plan("gpu01", plan),
            "placement (bind core):\n"
            "  host         role    rank  cores            NUMA  GPU          NIC\n"
            "  gpu01        server     0  8-15,24-31       1     -            mlx5_2\n"
            "  gpu01        worker     0  0-3,16-19        0     cuda:0=cuda0 mlx5_1\n"
            "  gpu01        worker     1  4-7,20-23        0     cuda:1=cuda1 mlx5_1\n");
  const auto lines = gpu_nic_affinity(node());
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0], "cuda0 (NUMA 0) nearest mlx5_1 (NUMA 0)");
  EXPECT_EQ(lines[3], "cuda3 (NUMA 0) nearest mlx5_0 (NUMA 0)");
  EXPECT_EQ(lines[7], "cuda7 (NUMA 1) nearest mlx5_3 (NUMA 1)");
}

TEST(Placement, ProcessEnv) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  const Plan plan = place(node(), {3, 1, Bind::kCore, std::nullopt});
  const Place& server = plan.places[0];
  const Place& worker2 = plan.places[3];
  EXPECT_EQ(process_env(worker2, "ucx", std::nullopt, false),
            (Env{{"PSRT_GPU", "2"}, {"UCX_NET_DEVICES", "mlx5_0:1"}}));
  EXPECT_EQ(process_env(server, "ucx", std::nullopt, false),  // on socket 1, away from them
            (Env{{"UCX_NET_DEVICES", "mlx5_2:1"}}));
  EXPECT_EQ(process_env(worker2, "ucx", "rc,sm", false),
            (Env{{"PSRT_GPU", "2"}, {"UCX_NET_DEVICES", "mlx5_0:1"}}));
  EXPECT_EQ(process_env(worker2, "ucx", "^ud", false),
            (Env{{"PSRT_GPU", "2"}, {"UCX_NET_DEVICES", "mlx5_0:1"}}));
  // The user's UCX_NET_DEVICES stays; tcp-only UCX_TLS and the tcp transport get no NIC.
  EXPECT_EQ(process_env(worker2, "ucx", std::nullopt, true), (Env{{"PSRT_GPU", "2"}}));
  EXPECT_EQ(process_env(worker2, "ucx", "tcp,sm", false), (Env{{"PSRT_GPU", "2"}}));
  EXPECT_EQ(process_env(worker2, "tcp", std::nullopt, false), (Env{{"PSRT_GPU", "2"}}));
  EXPECT_EQ(process_env(server, "tcp", std::nullopt, false), Env{});
}

TEST(Placement, ParseBindAndCpuList) {
  EXPECT_EQ(parse_bind("none"), Bind::kNone);
  EXPECT_EQ(parse_bind("numa"), Bind::kNuma);
  EXPECT_EQ(parse_bind("core"), Bind::kCore);
  EXPECT_EQ(parse_bind("auto"), Bind::kAuto);
  EXPECT_FALSE(parse_bind("socket"));
  EXPECT_EQ(cpu_list({5, 0, 1, 2, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(cpu_list({}), "");
}

TEST(Topology, ThisMachine) {
  const Topology t = read_topology();
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  int threads = 0;
  for (const auto& n : t.numa)
    for (const auto& c : n.cores)
      for (int pu : c) {
        EXPECT_TRUE(CPU_ISSET(pu, &mine)) << pu;
        ++threads;
      }
  EXPECT_EQ(threads, CPU_COUNT(&mine));
  const Plan plan = place(t, {1, 1, Bind::kCore, std::nullopt});
  for (const auto& p : plan.places)
    EXPECT_FALSE(p.cpus.empty()) << p.role;
}

TEST(Topology, MissingFileNamed) {
  try {
    read_topology("/nonexistent/topo.xml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topo.xml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace psrt::placement
