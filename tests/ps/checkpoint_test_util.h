// What the checkpoint unit tests share: one slice's fixed values, whole-file reads and writes
// (to damage files), and a scratch directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ps/session/protocol.h"

namespace psrt::ps::test {

inline const SliceRecord kSlice{1, 2, 100, 5};
inline constexpr std::uint64_t kKey = 42;
inline constexpr std::uint64_t kTotal = 200;
inline const std::vector<float> kWeights = {1.f, -2.5f, 3.25f, 0.f, 1e-20f};
inline const std::vector<float> kMomentum = {0.5f, 0.25f, -0.125f, 8.f, -0.f};

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// <tmp>/<prefix><pid>_<test name>, removed first; the fixture removes it in TearDown.
inline std::string test_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::string dir =
      (fs::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" +
                                    testing::UnitTest::GetInstance()->current_test_info()->name()))
          .string();
  fs::remove_all(dir);
  return dir;
}

}  // namespace psrt::ps::test
