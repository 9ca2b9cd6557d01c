#include "pstrain/data/idx.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "psrt/error.h"
#include "pstrain/data/file_bytes.h"

namespace psrt::pstrain {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;
constexpr int kMaxDims = 4;

std::string hex_bytes(const std::vector<uint8_t>& bytes, size_t count) {
  std::string out;
  for (size_t i = 0; i < count && i < bytes.size(); ++i) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%s0x%02x", i == 0 ? "" : " ", bytes[i]);
    out += buf;
  }
  return out.empty() ? "no bytes" : out;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i == 0 ? "" : ", ") + std::to_string(dims[i]);
  return out + "]";
}

uint32_t big_endian_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_maybe_gzip(path);
  const auto invalid = [&path](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, "IDX file '" + path + "': " + what);
  };

  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != kUnsignedByteType ||
      bytes[3] < 1 || bytes[3] > kMaxDims) {
    throw invalid("bad magic: expected 0x00 0x00 0x08 <ndims 1..4> (unsigned bytes), found " +
                  hex_bytes(bytes, 4) + "; is this an IDX file?");
  }
  const int ndims = bytes[3];
  const size_t header_size = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header_size) {
    throw invalid("truncated header: expected " + std::to_string(header_size) + " bytes for " +
                  std::to_string(ndims) + " dims, found " + std::to_string(bytes.size()) +
                  " bytes");
  }

  std::vector<int64_t> dims(ndims);
  uint64_t payload = 1;
  for (int i = 0; i < ndims; ++i) {
    dims[i] = big_endian_u32(bytes.data() + 4 + 4 * static_cast<size_t>(i));
    // Each dim < 2^32 and at most 4 dims: stop before the product can overflow.
    if (dims[i] != 0 && payload > (uint64_t{1} << 40) / static_cast<uint64_t>(dims[i])) {
      throw invalid("dims " + dims_text(dims) + " are implausibly large");
    }
    payload *= static_cast<uint64_t>(dims[i]);
  }
  const uint64_t found = bytes.size() - header_size;
  if (found < payload) {
    throw invalid("truncated: dims " + dims_text(dims) + " need " + std::to_string(payload) +
                  " payload bytes, found " + std::to_string(found) + " bytes");
  }
  if (found > payload) {
    throw invalid("trailing garbage: " + std::to_string(found - payload) +
                  " bytes after the payload of dims " + dims_text(dims) + " (expected " +
                  std::to_string(payload) + " payload bytes, found " + std::to_string(found) + ")");
  }

  torch::Tensor out = torch::empty(dims, torch::kUInt8);
  if (payload > 0) std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header_size, payload);
  return out;
}

}  // namespace psrt::pstrain
