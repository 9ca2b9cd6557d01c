#include "pstrain/data/idx.h"

#include <gtest/gtest.h>

#include "psrt/error.h"
#include "pstrain/data/file_bytes.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::counting_bytes;
using testing::idx_bytes;
using testing::TempDir;

// Every byte of `t` (uint8) equals `expected`, in row-major order.
void expect_bytes(const torch::Tensor& t, const std::vector<uint8_t>& expected) {
  ASSERT_EQ(t.scalar_type(), torch::kUInt8);
  ASSERT_TRUE(t.is_contiguous());
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  const uint8_t* p = t.data_ptr<uint8_t>();
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ(p[i], expected[i]) << "byte " << i;
}

class IdxRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTrip, Idx1) {
  const bool gzip = GetParam();
  TempDir dir;
  const std::vector<uint8_t> payload = {3, 0, 9, 255, 1, 7, 7};
  const std::string path = dir.file("labels");
  const std::vector<uint8_t> file = idx_bytes({7}, payload);
  if (gzip) {
    testing::write_gzip(path, file);
  } else {
    testing::write_file(path, file);
  }
  const torch::Tensor t = read_idx(path);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{7}));
  expect_bytes(t, payload);
}

TEST_P(IdxRoundTrip, Idx3) {
  const bool gzip = GetParam();
  TempDir dir;
  const std::vector<uint8_t> payload = counting_bytes(5 * 3 * 4, 200);  // wraps through 255
  const std::string path = dir.file("images");
  const std::vector<uint8_t> file = idx_bytes({5, 3, 4}, payload);
  if (gzip) {
    testing::write_gzip(path, file);
  } else {
    testing::write_file(path, file);
  }
  const torch::Tensor t = read_idx(path);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{5, 3, 4}));
  expect_bytes(t, payload);
  EXPECT_EQ(t[2][1][3].item<int>(), static_cast<uint8_t>(200 + 2 * 12 + 1 * 4 + 3));
}

TEST_P(IdxRoundTrip, LargeIdx3SpansManyInflateChunks) {
  const bool gzip = GetParam();
  TempDir dir;
  const std::vector<uint8_t> payload = counting_bytes(300 * 28 * 28, 17);
  const std::string path = dir.file("big");
  const std::vector<uint8_t> file = idx_bytes({300, 28, 28}, payload);
  if (gzip) {
    testing::write_gzip(path, file);
  } else {
    testing::write_file(path, file);
  }
  const torch::Tensor t = read_idx(path);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{300, 28, 28}));
  expect_bytes(t, payload);
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxRoundTrip, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Gzip" : "Raw";
                         });

TEST(Idx, Idx4) {
  TempDir dir;
  const std::vector<uint8_t> payload = counting_bytes(2 * 3 * 1 * 2);
  testing::write_file(dir.file("x"), idx_bytes({2, 3, 1, 2}, payload));
  const torch::Tensor t = read_idx(dir.file("x"));
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{2, 3, 1, 2}));
  expect_bytes(t, payload);
}

TEST(Idx, ConcatenatedGzipMembersDecompressToTheirConcatenation) {
  TempDir dir;
  const std::vector<uint8_t> file = idx_bytes({6}, {1, 2, 3, 4, 5, 6});
  testing::write_gzip(dir.file("a"), {file.begin(), file.begin() + 7});
  testing::write_gzip(dir.file("b"), {file.begin() + 7, file.end()});
  std::vector<uint8_t> both = read_file_bytes(dir.file("a"));
  const std::vector<uint8_t> second = read_file_bytes(dir.file("b"));
  both.insert(both.end(), second.begin(), second.end());
  testing::write_file(dir.file("ab"), both);
  const torch::Tensor t = read_idx(dir.file("ab"));
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{6}));
  expect_bytes(t, {1, 2, 3, 4, 5, 6});
}

TEST(Idx, MissingFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("nope-idx1-ubyte");
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kNotFound, "cannot open '" + path + "'");
}

TEST(Idx, WrongMagicSaysWhichBytesWereFound) {
  TempDir dir;
  const std::string path = dir.file("bad");
  testing::write_file(path, {0x00, 0x00, 0x0d, 0x03, 0, 0, 0, 0});  // idx3 of floats
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument, "IDX file '" + path + "'",
                    "bad magic", "expected 0x00 0x00 0x08 <ndims 1..4>",
                    "found 0x00 0x00 0x0d 0x03");
}

TEST(Idx, ZeroOrTooManyDimsIsBadMagic) {
  TempDir dir;
  testing::write_file(dir.file("zero"), {0x00, 0x00, 0x08, 0x00});
  EXPECT_PSRT_ERROR(read_idx(dir.file("zero")), ErrorCode::kInvalidArgument, "bad magic",
                    "found 0x00 0x00 0x08 0x00");
  testing::write_file(dir.file("five"), {0x00, 0x00, 0x08, 0x05});
  EXPECT_PSRT_ERROR(read_idx(dir.file("five")), ErrorCode::kInvalidArgument, "bad magic",
                    "found 0x00 0x00 0x08 0x05");
}

TEST(Idx, ShortOrEmptyFileIsBadMagic) {
  TempDir dir;
  testing::write_file(dir.file("empty"), {});
  EXPECT_PSRT_ERROR(read_idx(dir.file("empty")), ErrorCode::kInvalidArgument, "bad magic",
                    "found no bytes");
  testing::write_file(dir.file("two"), {0x00, 0x00});
  EXPECT_PSRT_ERROR(read_idx(dir.file("two")), ErrorCode::kInvalidArgument, "bad magic",
                    "found 0x00 0x00;");
}

TEST(Idx, TruncatedPayloadSaysExpectedAndFoundBytes) {
  TempDir dir;
  const std::string path = dir.file("short");
  testing::write_file(path, idx_bytes({4, 28, 28}, counting_bytes(4 * 28 * 28 - 100)));
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument, "IDX file '" + path + "'",
                    "truncated", "dims [4, 28, 28] need 3136 payload bytes, found 3036 bytes");
}

TEST(Idx, TruncatedGzipPayloadSaysExpectedAndFoundBytes) {
  TempDir dir;
  const std::string path = dir.file("short.gz");
  testing::write_gzip(path, idx_bytes({10}, counting_bytes(4)));
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument, path,
                    "need 10 payload bytes, found 4 bytes");
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir.file("hdr");
  testing::write_file(path, {0x00, 0x00, 0x08, 0x03, 0, 0, 0, 1, 0, 0});
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument, path, "truncated header",
                    "expected 16 bytes for 3 dims, found 10 bytes");
}

TEST(Idx, TrailingGarbage) {
  TempDir dir;
  const std::string path = dir.file("long");
  std::vector<uint8_t> file = idx_bytes({3}, {1, 2, 3});
  file.push_back(42);
  file.push_back(43);
  testing::write_file(path, file);
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument, path,
                    "trailing garbage: 2 bytes after the payload",
                    "expected 3 payload bytes, found 5");
}

TEST(Idx, CorruptGzipStream) {
  TempDir dir;
  testing::write_gzip(dir.file("ok.gz"), idx_bytes({64}, counting_bytes(64)));
  std::vector<uint8_t> bytes = read_file_bytes(dir.file("ok.gz"));
  ASSERT_GT(bytes.size(), 20U);
  // Flip bits in the deflate data (after the 10-byte header): a bad block or a CRC mismatch.
  for (size_t i = 12; i < bytes.size() - 8; ++i)
    bytes[i] ^= 0x5a;
  const std::string path = dir.file("corrupt.gz");
  testing::write_file(path, bytes);
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument,
                    "corrupt gzip file '" + path + "'");
}

TEST(Idx, CutGzipStream) {
  TempDir dir;
  testing::write_gzip(dir.file("ok.gz"), idx_bytes({64}, counting_bytes(64)));
  std::vector<uint8_t> bytes = read_file_bytes(dir.file("ok.gz"));
  bytes.resize(bytes.size() - 6);  // into the CRC/length trailer
  const std::string path = dir.file("cut.gz");
  testing::write_file(path, bytes);
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument,
                    "corrupt gzip file '" + path + "': the compressed stream is cut short");
}

TEST(Idx, GarbageAfterGzipStream) {
  TempDir dir;
  testing::write_gzip(dir.file("ok.gz"), idx_bytes({3}, {1, 2, 3}));
  std::vector<uint8_t> bytes = read_file_bytes(dir.file("ok.gz"));
  bytes.insert(bytes.end(), {'x', 'y', 'z'});
  const std::string path = dir.file("tail.gz");
  testing::write_file(path, bytes);
  EXPECT_PSRT_ERROR(read_idx(path), ErrorCode::kInvalidArgument,
                    "corrupt gzip file '" + path + "': 3 bytes of trailing garbage");
}

}  // namespace
}  // namespace psrt::pstrain
