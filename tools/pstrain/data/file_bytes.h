// Whole-file reads for the data set loaders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace psrt::pstrain {

// The bytes of the file at `path`. Throws psrt::Error (kNotFound) naming the path when it cannot
// be opened, kSystem when a read fails.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// True when `bytes` start with the gzip magic 0x1f 0x8b.
bool is_gzip(const std::vector<uint8_t>& bytes) noexcept;

// Decompresses a gzip file's bytes (one or more concatenated members). Throws psrt::Error
// (kInvalidArgument) naming `path` when the stream is corrupt, cut short or followed by bytes
// that are not another gzip member.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed, const std::string& path);

// read_file_bytes, then gunzip when the file starts with the gzip magic.
std::vector<uint8_t> read_file_maybe_gzip(const std::string& path);

}  // namespace psrt::pstrain
