// Preflight's pure parts with fixed inputs: ibv_query_port's width and speed codes turned into
// Gb/s, the link rate a perf run compares against, and the verdicts (runtime/preflight/).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "runtime/preflight/ib_probe.h"
#include "runtime/preflight/ib_rate.h"
#include "runtime/preflight/report.h"
#include "runtime/preflight/verdict.h"

namespace psrt::preflight {
namespace {

TEST(IbRate, EveryWidthCode) {
  EXPECT_EQ(ib_width_lanes(1), 1);
  EXPECT_EQ(ib_width_lanes(2), 4);
  EXPECT_EQ(ib_width_lanes(4), 8);
  EXPECT_EQ(ib_width_lanes(8), 12);
  EXPECT_EQ(ib_width_lanes(16), 2);
  for (int bad : {0, 3, 5, 32, 255})
    EXPECT_FALSE(ib_width_lanes(bad)) << bad;
}

TEST(IbRate, EverySpeedCode) {
  const std::pair<int, double> lanes[] = {{1, 2.5},   {2, 5.0},     {4, 10.0},
                                          {8, 10.0},  {16, 14.0},   {32, 25.0},
                                          {64, 50.0}, {128, 100.0}, {256, 200.0}};
  for (auto [code, gbps] : lanes)
    EXPECT_EQ(ib_lane_gbps(code), gbps) << code;
  for (int bad : {0, 3, 7, 512})
    EXPECT_FALSE(ib_lane_gbps(bad)) << bad;
  EXPECT_EQ(ib_speed_name(64), "HDR");
  EXPECT_EQ(ib_speed_name(128), "NDR");
  EXPECT_EQ(ib_speed_name(8), "FDR10");
  EXPECT_EQ(ib_speed_name(3), "speed code 3");
}

TEST(IbRate, PortRates) {
  EXPECT_EQ(ib_port_gbps(2, 32), 100.0);   // 4x EDR
  EXPECT_EQ(ib_port_gbps(2, 64), 200.0);   // 4x HDR
  EXPECT_EQ(ib_port_gbps(2, 128), 400.0);  // 4x NDR
  EXPECT_EQ(ib_port_gbps(16, 64), 100.0);  // 2x HDR (HDR100)
  EXPECT_EQ(ib_port_gbps(8, 4), 120.0);    // 12x QDR
  EXPECT_EQ(ib_port_gbps(1, 1), 2.5);      // 1x SDR
  EXPECT_EQ(ib_port_gbps(2, 16), 56.0);    // 4x FDR
  EXPECT_FALSE(ib_port_gbps(3, 64));
  EXPECT_FALSE(ib_port_gbps(2, 3));
  EXPECT_EQ(describe_ib_rate(2, 64), "4x HDR (200 Gb/s)");
  EXPECT_EQ(describe_ib_rate(2, 128), "4x NDR (400 Gb/s)");
  EXPECT_EQ(describe_ib_rate(1, 1), "1x SDR (2.5 Gb/s)");
  EXPECT_EQ(describe_ib_rate(3, 64), "width code 3, HDR (rate unknown)");
}

IbFacts two_nics() {
  IbFacts ib;
  ib.devices = 3;
  ib.ports = {{"mlx5_0", 1, "ACTIVE", "InfiniBand", 2, 64},   // 200
              {"mlx5_1", 1, "ACTIVE", "InfiniBand", 2, 128},  // 400
              {"mlx5_2", 1, "DOWN", "InfiniBand", 2, 256}};   // would be 800
  return ib;
}

TEST(LinkRate, FastestActivePortOrTheNamedOne) {
  const IbFacts ib = two_nics();
  EXPECT_EQ(link_gbps(ib, ""), 400.0);
  EXPECT_EQ(link_gbps(ib, "all"), 400.0);
  EXPECT_EQ(link_gbps(ib, "mlx5_0:1"), 200.0);
  EXPECT_EQ(link_gbps(ib, "mlx5_0"), 200.0);
  EXPECT_EQ(link_gbps(ib, "mlx5_2:1,mlx5_0:1"), 200.0);  // the down one is skipped
  EXPECT_FALSE(link_gbps(ib, "mlx5_2:1"));
  EXPECT_FALSE(link_gbps(ib, "mlx5_9:1"));
  EXPECT_FALSE(link_gbps(IbFacts{}, ""));
}

TEST(Verdict, TlsClasses) {
  EXPECT_TRUE(tls_needs_rdma("rc"));
  EXPECT_TRUE(tls_needs_rdma("sm,rc_x"));
  EXPECT_TRUE(tls_needs_rdma("tcp,dc"));
  EXPECT_TRUE(tls_needs_rdma("ud_verbs"));
  EXPECT_TRUE(tls_needs_rdma("ib"));
  EXPECT_FALSE(tls_needs_rdma("tcp,sm,self"));
  EXPECT_FALSE(tls_needs_rdma("^rc"));
  EXPECT_FALSE(tls_needs_rdma(""));
  EXPECT_TRUE(tls_needs_cuda("rc,cuda_copy"));
  EXPECT_TRUE(tls_needs_cuda("gdr_copy"));
  EXPECT_FALSE(tls_needs_cuda("tcp"));
}

HostFacts bare_host() {  // this machine: no RDMA, no GPU, UCX with tcp
  HostFacts f;
  f.host = "h1";
  f.ib.error = "no RDMA support in this kernel: ibv_get_device_list: Function not implemented";
  f.ucx = {true, "1.13.1", "", {"self", "tcp"}, false, ""};
  f.cuda.why = "no driver";
  f.memlock.soft = f.memlock.hard = std::uint64_t{8} << 20;
  return f;
}

// What a job needs: its transport, UCX_TLS ("" = unset) and the CUDA device it computes on.
Requirements needs(std::string transport, std::string ucx_tls, std::optional<int> cuda_device) {
  Requirements r;
  r.transport = std::move(transport);
  r.ucx_tls = std::move(ucx_tls);
  r.cuda_device = cuda_device;
  return r;
}

TEST(Verdict, TcpJobPassesWithoutDevices) {
  const auto checks = judge(bare_host(), needs("tcp", "", std::nullopt));
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].level, Level::kPass);
  EXPECT_EQ(checks[0].what, "transport tcp: needs no RDMA device");
  EXPECT_TRUE(passes(checks));
}

TEST(Verdict, UcxDefaultTlsPassesOnTcp) {
  const auto checks = judge(bare_host(), needs("ucx", "", std::nullopt));
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].what, "transport ucx: UCX 1.13.1 starts (self, tcp)");
  EXPECT_TRUE(passes(checks));
}

TEST(Verdict, RcWithoutDeviceFailsNamingIt) {
  HostFacts f = bare_host();
  f.ucx.error = "ucp_init: No such device";
  const auto checks = judge(f, needs("ucx", "rc", std::nullopt));
  ASSERT_EQ(checks.size(), 1u);  // the missing device, not UCX's echo of it
  EXPECT_EQ(checks[0].level, Level::kFail);
  EXPECT_EQ(checks[0].what,
            "UCX_TLS=rc needs an RDMA device (InfiniBand or RoCE) and this host has none (no "
            "RDMA support in this kernel: ibv_get_device_list: Function not implemented)");
  EXPECT_EQ(checks[0].fix,
            "run on a host with an InfiniBand or RoCE NIC (ibv_devinfo lists it), or set "
            "UCX_TLS=tcp, or use --transport tcp");
  EXPECT_FALSE(passes(checks));
}

TEST(Verdict, RcWithDownPortFails) {
  HostFacts f = bare_host();
  f.ib = {};
  f.ib.devices = 1;
  f.ib.ports = {{"mlx5_0", 1, "DOWN", "InfiniBand", 2, 64}};
  const auto checks = judge(f, needs("ucx", "rc_x,sm", std::nullopt));
  ASSERT_FALSE(checks.empty());
  EXPECT_EQ(checks[0].what,
            "UCX_TLS=rc_x,sm needs an ACTIVE RDMA port and none is (mlx5_0:1 DOWN)");
  EXPECT_FALSE(passes(checks));
}

TEST(Verdict, RcWithActivePortChecksMemlock) {
  HostFacts f = bare_host();
  f.ib = two_nics();
  auto checks = judge(f, needs("ucx", "rc", std::nullopt));
  ASSERT_EQ(checks.size(), 2u);  // no "UCX starts" line after a failure
  EXPECT_EQ(checks[0].what,
            "UCX_TLS=rc: RDMA port mlx5_0:1 4x HDR (200 Gb/s), mlx5_1:1 4x NDR (400 Gb/s)");
  EXPECT_EQ(checks[1].level, Level::kFail);
  EXPECT_EQ(checks[1].what,
            "the locked-memory limit is 8 MiB: RDMA registers the job's buffers and needs it "
            "high (at least 64 MiB)");
  EXPECT_FALSE(passes(checks));

  f.memlock.soft = std::uint64_t{1} << 30;
  checks = judge(f, needs("ucx", "rc", std::nullopt));
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[1].level, Level::kWarn);
  EXPECT_EQ(checks[1].what, "the locked-memory limit is 1 GiB: large models may not register");
  EXPECT_EQ(checks[2].what, "transport ucx: UCX 1.13.1 starts (self, tcp)");
  EXPECT_TRUE(passes(checks));

  f.memlock.soft.reset();  // unlimited
  checks = judge(f, needs("ucx", "rc", std::nullopt));
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_TRUE(passes(checks));
}

TEST(Verdict, NetDevicesMustNameAnActivePort) {
  HostFacts f = bare_host();
  f.ib = two_nics();
  f.memlock.soft.reset();
  Requirements job{"ucx", "rc", std::nullopt, "mlx5_1:1"};
  EXPECT_TRUE(passes(judge(f, job)));
  job.ucx_net_devices = "mlx5_4:1";
  auto checks = judge(f, job);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].what,
            "UCX_NET_DEVICES=mlx5_4:1 names no RDMA port of this host (it has mlx5_0:1 ACTIVE, "
            "mlx5_1:1 ACTIVE, mlx5_2:1 DOWN)");
  EXPECT_EQ(checks[0].fix,
            "set UCX_NET_DEVICES to an ACTIVE port of the list (ibstat), or leave it unset");
  job.ucx_net_devices = "mlx5_2:1";
  checks = judge(f, job);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].what, "UCX_NET_DEVICES=mlx5_2:1 names no ACTIVE RDMA port (mlx5_2:1 DOWN)");
  job.ucx_net_devices = "mlx5_2:1,mlx5_0";  // a down one, then an active one
  EXPECT_TRUE(passes(judge(f, job)));
  job.ucx_net_devices = "all";
  EXPECT_TRUE(passes(judge(f, job)));
}

TEST(Verdict, CudaTransportsNeedGpuAndCudaUcx) {
  HostFacts f = bare_host();
  auto checks = judge(f, needs("ucx", "tcp,cuda_copy", std::nullopt));
  ASSERT_FALSE(checks.empty());
  EXPECT_EQ(checks[0].what,
            "UCX_TLS=tcp,cuda_copy needs a CUDA device and this host has none (no driver)");
  f.cuda.devices = {"NVIDIA H100"};
  checks = judge(f, needs("ucx", "tcp,cuda_copy", std::nullopt));
  EXPECT_EQ(checks[0].what,
            "UCX_TLS=tcp,cuda_copy needs UCX with CUDA support, and UCX 1.13.1 here cannot move "
            "CUDA memory");
  f.ucx.cuda_memory = true;
  EXPECT_TRUE(passes(judge(f, needs("ucx", "tcp,cuda_copy", std::nullopt))));
}

TEST(Verdict, UcxNotBuiltOrNotStarting) {
  HostFacts f = bare_host();
  f.ucx = {};
  auto checks = judge(f, needs("ucx", "", std::nullopt));
  EXPECT_EQ(checks.at(0).what, "transport ucx: this psrun was built without UCX");
  f = bare_host();
  f.ucx.error = "ucp_init: Out of memory";
  checks = judge(f, needs("ucx", "tcp", std::nullopt));
  EXPECT_EQ(checks.at(0).what,
            "transport ucx: UCX 1.13.1 does not start here: ucp_init: Out of "
            "memory");
  EXPECT_FALSE(passes(checks));
}

TEST(Verdict, CudaDeviceOfTheJob) {
  HostFacts f = bare_host();
  auto checks = judge(f, needs("tcp", "", 0));
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[1].what,
            "the job computes on cuda:0 and this host has no CUDA device (no "
            "driver)");
  f.cuda.devices = {"A", "B"};
  checks = judge(f, needs("tcp", "", 2));
  EXPECT_EQ(checks[1].what, "the job computes on cuda:2 and this host has 2 (cuda:0..cuda:1)");
  checks = judge(f, needs("tcp", "", 1));
  EXPECT_EQ(checks[1].what, "cuda:1: B");
  EXPECT_TRUE(passes(checks));
}

TEST(Verdict, SchedulerPort) {
  HostFacts f = bare_host();
  f.scheduler = {true, "10.0.0.1:7450", "connect 10.0.0.1:7450: Connection refused"};
  const auto checks = judge(f, needs("tcp", "", std::nullopt));
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[1].what,
            "the scheduler's port 10.0.0.1:7450 is not reachable: connect "
            "10.0.0.1:7450: Connection refused");
  EXPECT_FALSE(passes(checks));
}

TEST(Report, TableOfAHost) {
  HostFacts f = bare_host();
  f.ib = two_nics();
  f.memlock.soft.reset();
  f.memlock.hard.reset();
  const auto checks = judge(f, needs("ucx", "rc", std::nullopt));
  EXPECT_EQ(format_report(f, checks),
            "preflight: host h1\n"
            "  UCX            1.13.1; UCX_TLS=(unset: all); transports: self, tcp; CUDA memory: "
            "no\n"
            "  mlx5_0:1       ACTIVE InfiniBand 4x HDR (200 Gb/s)\n"
            "  mlx5_1:1       ACTIVE InfiniBand 4x NDR (400 Gb/s)\n"
            "  mlx5_2:1       DOWN InfiniBand 4x XDR (800 Gb/s)\n"
            "  locked memory  unlimited (hard limit unlimited)\n"
            "  CUDA           no device: no driver\n"
            "  PASS  UCX_TLS=rc: RDMA port mlx5_0:1 4x HDR (200 Gb/s), mlx5_1:1 4x NDR (400 "
            "Gb/s)\n"
            "  PASS  transport ucx: UCX 1.13.1 starts (self, tcp)\n"
            "preflight: h1 passes\n");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(std::uint64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace psrt::preflight
