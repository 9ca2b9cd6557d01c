// Whole jobs with GPU memory on 127.0.0.1: CUDA servers (psrun --server-device cuda) and workers
// pushing and pulling CUDA device memory, with exact integer-valued results checked by the
// workers (gpu_worker, ps_worker). GpuJob.* need a usable GPU and skip without one; NoGpu.*
// check the errors a machine without one gives, and skip where a GPU is present.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "device/cuda_device.h"
#define PSRT_SCRATCH_PREFIX "psrt_gpu_job_test_"
#include "tests/gpu_skip.h"
#include "tests/integration/job_runner.h"
#include "transport/factory.h"

namespace {

namespace fs = std::filesystem;

using psrt::test::Run;

Run psrun(const std::string& args, const std::string& worker, const std::string& env = "") {
  return psrt::test::run_psrun(env, args, worker);
}

class GpuJob : public ::testing::TestWithParam<std::string> {};

// Whether a backend of this build carries CUDA memory itself (path a): asked of a live one.
bool transport_carries_cuda(const std::string& name) {
  struct Idle : psrt::transport::Receiver {
    psrt::transport::Placement place(psrt::transport::Connection&, std::span<const std::byte>,
                                     std::size_t) override {
      throw psrt::Error(psrt::ErrorCode::kProtocol, "not listening");
    }
    void on_message(psrt::transport::Connection&, std::span<const std::byte>,
                    const psrt::transport::Placement&) override {}
    void on_closed(psrt::transport::Connection&, const psrt::Status&) override {}
  };
  auto t = psrt::transport::create_transport(name, std::make_shared<Idle>());
  const bool carries = t->supports(psrt::MemoryType::kCuda);
  t->shutdown();
  return carries;
}

TEST_P(GpuJob, CudaServerWithDeviceTensorsOverCudaIpcIsExact) {
  PSRT_REQUIRE_GPU();
  if (transport_carries_cuda(GetParam())) GTEST_SKIP() << "this UCX carries CUDA memory: path a";
  auto r = psrun("--transport " + GetParam() +
                     " -n 4 -s 2 --lr 1 --partition-bytes 262144 --server-device cuda",
                 GPU_WORKER_PATH " device-exact --rounds 3");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS device-exact"), 4) << r.out;
  // Same host, CUDA servers: every worker shares its buffers with both servers (path b).
  EXPECT_EQ(r.count("CUDA memory takes path b"), 8) << r.out;
}

TEST_P(GpuJob, CudaServerWithDeviceTensorsStagedIsExact) {
  PSRT_REQUIRE_GPU();
  if (transport_carries_cuda(GetParam())) GTEST_SKIP() << "this UCX carries CUDA memory: path a";
  auto r = psrun("--transport " + GetParam() +
                     " -n 4 -s 2 --lr 1 --partition-bytes 262144 --server-device cuda",
                 GPU_WORKER_PATH " device-exact --rounds 3", "PSRT_CUDA_IPC=0");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS device-exact"), 4) << r.out;
  // Debian's UCX and TCP carry no CUDA memory: both ends stage, and say so.
  EXPECT_EQ(r.count("(path c, staged)"), 2) << r.out;
  EXPECT_EQ(r.count("CUDA memory takes path c: PSRT_CUDA_IPC=0"), 8) << r.out;
}

TEST_P(GpuJob, CudaServerWithBf16DeviceGradientsIsExact) {
  PSRT_REQUIRE_GPU();
  auto r = psrun("--transport " + GetParam() + " -n 2 --lr 1 --server-device cuda:0",
                 GPU_WORKER_PATH " device-exact --rounds 2 --grad bf16");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS device-exact"), 2) << r.out;
}

TEST_P(GpuJob, CudaServerWithHostTensorsIsExact) {
  PSRT_REQUIRE_GPU();
  auto r = psrun("--transport " + GetParam() +
                     " -n 4 -s 2 --lr 1 --partition-bytes 1048576 --server-device cuda",
                 PS_WORKER_PATH " exact --rounds 3 --sizes 1,7,1000,4099,1048579");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 4) << r.out;
}

TEST_P(GpuJob, CpuServerWithDeviceTensorsIsExact) {
  PSRT_REQUIRE_GPU();
  auto r = psrun("--transport " + GetParam() + " -n 2 --lr 1",
                 GPU_WORKER_PATH " device-exact --rounds 2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS device-exact"), 2) << r.out;
  if (!transport_carries_cuda(GetParam())) {
    EXPECT_EQ(r.count("path c: the server keeps its slices on the cpu"), 2) << r.out;
  }
}

TEST_P(GpuJob, CudaServerAsyncModeIsExact) {
  PSRT_REQUIRE_GPU();
  auto r = psrun("--transport " + GetParam() + " -n 3 --mode async --lr 1 --server-device cuda",
                 PS_WORKER_PATH " async --rounds 4");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS async"), 3) << r.out;
}

TEST_P(GpuJob, CudaServerResumesFromItsCheckpoint) {
  PSRT_REQUIRE_GPU();
  const auto dir = fs::temp_directory_path() / ("psrt_gpu_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string args = "--transport " + GetParam() +
                           " -n 2 -s 2 --lr 1 --partition-bytes 4096 --server-device cuda "
                           "--checkpoint-every 2 --checkpoint-dir " +
                           dir.string();
  auto first = psrun(args, PS_WORKER_PATH " resume --rounds 6 --kill-after 4 --sizes 7,5000");
  EXPECT_NE(first.rc, 0) << first.out;
  EXPECT_EQ(first.count("KILLING after round 4"), 1) << first.out;
  auto second = psrun(args, PS_WORKER_PATH " resume --rounds 6 --sizes 7,5000");
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_EQ(second.count("RESUMED 4"), 2) << second.out;
  EXPECT_EQ(second.count("PASS resume"), 2) << second.out;
  fs::remove_all(dir);
}

TEST_P(GpuJob, CudaServerSkipsANonFiniteRoundExactly) {
  PSRT_REQUIRE_GPU();
  // ps_worker guard checks every value; the CUDA server must give exactly what the CPU one does.
  auto r = psrun("--transport " + GetParam() +
                     " -n 2 --lr 1 --momentum 0.5 --dampening 0.5 --skip-nonfinite "
                     "--partition-bytes 4096 --server-device cuda",
                 PS_WORKER_PATH " guard");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS guard"), 2) << r.out;
  EXPECT_EQ(r.count("update skipped, weights and momentum unchanged"), 1) << r.out;
}

TEST_P(GpuJob, CudaServerClipsExactly) {
  PSRT_REQUIRE_GPU();
  auto r =
      psrun("--transport " + GetParam() + " -n 2 --lr 1 --max-grad-norm 1 --server-device cuda",
            PS_WORKER_PATH " clip");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS clip"), 2) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Transports, GpuJob,
                         ::testing::ValuesIn(psrt::transport::available_backends()),
                         [](const auto& info) { return info.param; });

TEST(NoGpu, CudaServerStopsTheJobNamingTheCause) {
  if (::psrt::testing::no_gpu_reason().empty()) GTEST_SKIP() << "a GPU is usable here";
  auto r = psrun("--transport tcp -n 1 --server-device cuda:0", PS_WORKER_PATH " exact");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("--server-device cuda:0: CUDA device 0 is not usable"), 1) << r.out;
  EXPECT_EQ(r.count("PASS"), 0) << r.out;
}

TEST(NoGpu, UnknownServerDeviceIsRefusedBeforeAnythingStarts) {
  auto r = psrun("--transport tcp -n 1 --server-device gpu0", PS_WORKER_PATH " exact");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("unknown device 'gpu0': use cpu, cuda (device 0) or cuda:N"), 1) << r.out;
  EXPECT_EQ(r.count("job:"), 0) << r.out;  // the scheduler never started
}

TEST(NoGpu, DeviceBufferIsRefusedAndTheWorkerCarriesOn) {
  if (::psrt::testing::no_gpu_reason().empty()) GTEST_SKIP() << "a GPU is usable here";
  auto r = psrun("--transport tcp -n 1 --lr 1", GPU_WORKER_PATH " no-device");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("REFUSED a buffer marked as CUDA memory, but this process cannot use CUDA"), 1)
      << r.out;
  EXPECT_EQ(r.count("PASS no-device"), 1) << r.out;
}

}  // namespace
