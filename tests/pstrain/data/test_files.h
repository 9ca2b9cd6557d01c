// Small files for the data layer's tests: a temp directory removed on destruction, raw and gzip
// writers, and IDX / CIFAR record builders.
#pragma once

#include <gtest/gtest.h>
#include <torch/types.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace psrt::pstrain::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "pstrain_data_test.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// An IDX file of unsigned bytes: magic 0x00 0x00 0x08 <ndims>, big-endian dims, payload.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Bytes 0, 1, 2, ... (mod 256), `count` of them.
inline std::vector<uint8_t> counting_bytes(size_t count, uint8_t start = 0) {
  std::vector<uint8_t> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<uint8_t>(start + i);
  return out;
}

// The values of an integer tensor, in row-major order.
inline std::vector<int64_t> int_values(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kInt64).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Asserts that `statement` throws psrt::Error with `error_code` whose message contains every one of
// the strings after it.
#define EXPECT_PSRT_ERROR(statement, error_code, ...)                         \
  do {                                                                        \
    try {                                                                     \
      statement;                                                              \
      ADD_FAILURE() << "expected psrt::Error from " #statement;               \
    } catch (const psrt::Error& e) {                                          \
      EXPECT_EQ(e.code(), error_code) << e.what();                            \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__}) { \
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)        \
            << "message '" << e.what() << "' lacks '" << part << "'";         \
      }                                                                       \
    }                                                                         \
  } while (0)

}  // namespace psrt::pstrain::testing
