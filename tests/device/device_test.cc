// device/ and the worker's staging (ps/device_staging.h): device names, what the CUDA runtime
// reports, and the errors a machine without a usable GPU gives (Device.*, everywhere); copies,
// ordering and the pinned pool on a real GPU (DeviceGpu.*, label gpu: skip without one).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <numeric>
#include <vector>

#include "device/cuda_device.h"
#include "device/memory.h"
#include "ps/device_staging.h"
#include "tests/gpu_skip.h"

namespace psrt {
namespace {

TEST(Device, ParsesTheAcceptedNames) {
  EXPECT_EQ(device::parse_device("cpu"), (device::DeviceSpec{MemoryType::kHost, 0}));
  EXPECT_EQ(device::parse_device("cuda"), (device::DeviceSpec{MemoryType::kCuda, 0}));
  EXPECT_EQ(device::parse_device("cuda:0"), (device::DeviceSpec{MemoryType::kCuda, 0}));
  EXPECT_EQ(device::parse_device("cuda:13"), (device::DeviceSpec{MemoryType::kCuda, 13}));
  EXPECT_EQ(device::to_string(device::parse_device("cuda:3")), "cuda:3");
  EXPECT_EQ(device::to_string(device::parse_device("cpu")), "cpu");
}

TEST(Device, RefusesOtherNamesNamingTheForms) {
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1x", "cuda:0:1", "cpu:0",
                          "cuda:99999999999"}) {
    try {
      device::parse_device(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("use cpu, cuda (device 0) or cuda:N"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Device, HostMemoryIsLocatedAsHost) {
  std::vector<float> v(16);
  EXPECT_EQ(device::locate(v.data()), device::DeviceSpec{});
  EXPECT_EQ(device::locate(nullptr), device::DeviceSpec{});
}

TEST(Device, CountExplainsWhyThereIsNoDevice) {
  std::string why;
  const int count = device::cuda_device_count(&why);
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_GT(count, 0);
  }
}

TEST(Device, OutOfRangeDeviceIsRefused) {
  for (int index : {-1, 1 << 20}) {
    try {
      device::require_cuda_device(index);
      ADD_FAILURE() << "accepted device " << index;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(index)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Device, WithoutAGpuNothingIsAllocatedAndTheCauseIsNamed) {
  const std::string why = ::psrt::testing::no_gpu_reason();
  if (why.empty()) GTEST_SKIP() << "a GPU is usable here";
  auto expect_unsupported = [&](auto&& make, const char* what) {
    try {
      make();
      ADD_FAILURE() << what << " succeeded without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << what;
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  expect_unsupported([] { device::DeviceMemory::allocate(0, 64); }, "DeviceMemory");
  expect_unsupported([] { device::PinnedMemory::allocate(64, 0); }, "PinnedMemory");
  expect_unsupported([] { device::Stream s(0); }, "Stream");
  expect_unsupported([] { ps::DeviceStaging s(0); }, "DeviceStaging");
}

TEST(DeviceGpu, DeviceMemoryIsLocatedOnItsDevice) {
  PSRT_REQUIRE_GPU();
  auto m = device::DeviceMemory::allocate(0, 1 << 20);
  EXPECT_EQ(device::locate(m.data()), (device::DeviceSpec{MemoryType::kCuda, 0}));
  // An interior pointer, as a caching allocator hands out, is device memory too.
  EXPECT_EQ(device::locate(static_cast<char*>(m.data()) + 4096),
            (device::DeviceSpec{MemoryType::kCuda, 0}));
  auto pinned = device::PinnedMemory::allocate(64, 0);
  EXPECT_EQ(device::locate(pinned.data()), device::DeviceSpec{});
}

TEST(DeviceGpu, StagingRoundTripKeepsEveryByteAndRunsCallbacksInOrder) {
  PSRT_REQUIRE_GPU();
  ps::DeviceStaging staging(0);
  constexpr std::size_t kSlices = 16, kBytes = (1 << 20) + 3;  // odd size: no alignment luck
  auto dev = device::DeviceMemory::allocate(0, kSlices * kBytes);
  std::vector<std::vector<std::byte>> src(kSlices, std::vector<std::byte>(kBytes));
  for (std::size_t s = 0; s < kSlices; ++s)
    for (std::size_t i = 0; i < kBytes; ++i)
      src[s][i] = std::byte((s * 131 + i * 7) & 0xff);
  std::vector<std::byte> back(kSlices * kBytes, std::byte{0xee});
  std::vector<int> order;
  std::mutex mu;
  std::promise<void> all;
  std::atomic<int> left{kSlices};
  for (std::size_t s = 0; s < kSlices; ++s) {
    // host -> pinned (memcpy) -> device -> pinned -> host, through the staging queue twice.
    auto up = staging.take(kBytes);
    ASSERT_GE(up->size(), kBytes);
    std::memcpy(up->data(), src[s].data(), kBytes);
    auto* d = static_cast<std::byte*>(dev.data()) + s * kBytes;
    staging.copy_then(d, up->data(), kBytes, [&, s, up, d](const Status& st) {
      ASSERT_TRUE(st.ok()) << st.message();
      staging.give(up);
      auto down = staging.take(kBytes);
      staging.copy_then(down->data(), d, kBytes, [&, s, down](const Status& st2) {
        ASSERT_TRUE(st2.ok()) << st2.message();
        std::memcpy(back.data() + s * kBytes, down->data(), kBytes);
        staging.give(down);
        {
          std::lock_guard lock(mu);
          order.push_back(static_cast<int>(s));
        }
        if (--left == 0) all.set_value();
      });
    });
  }
  ASSERT_EQ(all.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::vector<int> expect(kSlices);
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(order, expect);
  for (std::size_t s = 0; s < kSlices; ++s)
    ASSERT_EQ(std::memcmp(back.data() + s * kBytes, src[s].data(), kBytes), 0) << "slice " << s;
}

TEST(DeviceGpu, PoolReusesPinnedBuffers) {
  PSRT_REQUIRE_GPU();
  ps::DeviceStaging staging(0);
  auto a = staging.take(1000);
  void* first = a->data();
  staging.give(std::move(a));
  auto b = staging.take(900);  // close enough in size: the same buffer comes back
  EXPECT_EQ(b->data(), first);
  auto c = staging.take(1 << 20);  // much larger: a fresh one
  EXPECT_NE(c->data(), first);
  EXPECT_GE(c->size(), std::size_t{1} << 20);
}

}  // namespace
}  // namespace psrt
