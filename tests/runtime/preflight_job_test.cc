// The real psrun --preflight on this host: a tcp job passes, an ucx job asking UCX_TLS=rc fails
// naming the missing RDMA device, a taken scheduler port fails naming it. The RDMA and GPU
// assertions hold on hosts without those (this machine, CI); on a host with them the tests
// that need their absence skip.
#define PSRT_SCRATCH_PREFIX "psrt_preflight_test_"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "psrt/config.h"
#include "tests/integration/job_runner.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

bool host_has_rdma() {
  std::error_code ec;
  return std::filesystem::exists("/sys/class/infiniband", ec) &&
         !std::filesystem::is_empty("/sys/class/infiniband", ec);
}

psrt::test::Run preflight(const std::string& env, const std::string& args) {
  return run_psrun_bounded(env, "--preflight " + args, "true", 60s);
}

TEST(Preflight, TcpJobPassesOnThisHost) {
  const psrt::test::Run r = preflight("", "--transport tcp");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("  PASS  transport tcp: needs no RDMA device\n"), 1) << r.out;
  EXPECT_EQ(r.count("  locked memory  "), 1) << r.out;
  EXPECT_EQ(r.count("  scheduler      127.0.0.1:"), 1) << r.out;
  EXPECT_EQ(r.count(" passes\n"), 1) << r.out;
  EXPECT_EQ(r.count("FAIL"), 0) << r.out;
  if (!host_has_rdma()) {
    EXPECT_EQ(r.count("  RDMA devices   none ("), 1) << r.out;
  }
}

TEST(Preflight, UcxRcWithoutRdmaDeviceFailsNamingIt) {
  if (!PSRT_HAVE_UCX) GTEST_SKIP() << "built without UCX";
  if (host_has_rdma()) GTEST_SKIP() << "this host has an RDMA device";
  const psrt::test::Run r = preflight("UCX_TLS=rc", "--transport ucx");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("  FAIL  UCX_TLS=rc needs an RDMA device (InfiniBand or RoCE) and this host "
                    "has none ("),
            1)
      << r.out;
  EXPECT_EQ(r.count("        what to do: run on a host with an InfiniBand or RoCE NIC"), 1)
      << r.out;
  EXPECT_EQ(r.count(" FAILS (1 of 2 checks)\n"), 1) << r.out;
}

TEST(Preflight, TakenSchedulerPortFails) {
  // A listener of this test holds the port psrun is asked to use.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  const psrt::test::Run r = preflight("", "--transport tcp --port " + std::to_string(port));
  ::close(fd);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("  FAIL  the scheduler's port 127.0.0.1:" + std::to_string(port) +
                    " is not reachable: cannot listen there: Address already in use\n"),
            1)
      << r.out;
  EXPECT_EQ(r.count("what to do: pick another --port or --interface"), 1) << r.out;
}

TEST(Preflight, CudaServerDeviceWithoutGpuFails) {
  if (std::filesystem::exists("/dev/nvidia0") && PSRT_HAVE_CUDA) GTEST_SKIP() << "a GPU is here";
  const psrt::test::Run r = preflight("", "--transport tcp --server-device cuda:0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("  FAIL  the job computes on cuda:0 and this host has no CUDA device ("), 1)
      << r.out;
  EXPECT_EQ(r.count("  CUDA           no device: "), 1) << r.out;
}

}  // namespace
}  // namespace psrt::test
