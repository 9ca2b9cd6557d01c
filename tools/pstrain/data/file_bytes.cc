#include "pstrain/data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "psrt/error.h"

namespace psrt::pstrain {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

// The gzip trailer's ISIZE: the uncompressed size mod 2^32 of the last member. A size hint only.
size_t gzip_size_hint(const std::vector<uint8_t>& compressed) {
  if (compressed.size() < 18) return 0;
  const uint8_t* t = compressed.data() + compressed.size() - 4;
  return static_cast<size_t>(t[0]) | static_cast<size_t>(t[1]) << 8 |
         static_cast<size_t>(t[2]) << 16 | static_cast<size_t>(t[3]) << 24;
}

std::string zlib_message(const z_stream& zs, int rc) {
  if (zs.msg != nullptr) return zs.msg;
  return "zlib error " + std::to_string(rc);
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw Error(ErrorCode::kNotFound, "cannot open '" + path + "': " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes;
  if (std::fseek(file.get(), 0, SEEK_END) == 0) {
    const long size = std::ftell(file.get());
    if (size > 0) bytes.reserve(static_cast<size_t>(size));
    std::rewind(file.get());
  }
  uint8_t chunk[1 << 16];
  for (;;) {
    const size_t got = std::fread(chunk, 1, sizeof(chunk), file.get());
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (got < sizeof(chunk)) break;
  }
  if (std::ferror(file.get()) != 0) {
    throw Error(ErrorCode::kSystem, "cannot read '" + path + "': " + std::strerror(errno));
  }
  return bytes;
}

bool is_gzip(const std::vector<uint8_t>& bytes) noexcept {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed, const std::string& path) {
  // Deflate cannot expand more than ~1032:1, so a corrupt trailer cannot make us over-allocate.
  const size_t hint = std::min(gzip_size_hint(compressed), compressed.size() * 1032);
  std::vector<uint8_t> out(std::max<size_t>(hint, 1 << 16));
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (checks the CRC-32 and length).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw Error(ErrorCode::kInternal, "cannot start zlib to decompress '" + path + "'");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  size_t in_pos = 0;
  size_t out_pos = 0;
  constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max();
  for (;;) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    zs.next_in = const_cast<Bytef*>(compressed.data() + in_pos);
    zs.avail_in = static_cast<uInt>(std::min(compressed.size() - in_pos, kMaxChunk));
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(std::min(out.size() - out_pos, kMaxChunk));
    const uInt avail_in = zs.avail_in;
    const uInt avail_out = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += avail_in - zs.avail_in;
    out_pos += avail_out - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member may follow (concatenated gzip files decompress to their concatenation).
      if (in_pos == compressed.size()) break;
      if (compressed.size() - in_pos < 2 || compressed[in_pos] != 0x1f ||
          compressed[in_pos + 1] != 0x8b) {
        throw Error(ErrorCode::kInvalidArgument,
                    "corrupt gzip file '" + path +
                        "': " + std::to_string(compressed.size() - in_pos) +
                        " bytes of trailing garbage after the compressed stream");
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && in_pos == compressed.size()) {
      throw Error(ErrorCode::kInvalidArgument, "corrupt gzip file '" + path +
                                                   "': the compressed stream is cut short after " +
                                                   std::to_string(compressed.size()) + " bytes");
    }
    // No progress for want of output space: grown at the top of the loop.
    if (rc == Z_BUF_ERROR && out_pos == out.size()) continue;
    throw Error(ErrorCode::kInvalidArgument,
                "corrupt gzip file '" + path + "': " + zlib_message(zs, rc));
  }
  out.resize(out_pos);
  return out;
}

std::vector<uint8_t> read_file_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  if (!is_gzip(bytes)) return bytes;
  return gunzip(bytes, path);
}

}  // namespace psrt::pstrain
