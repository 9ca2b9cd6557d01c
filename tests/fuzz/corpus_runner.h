// The main() of a fuzz target's corpus test (hello_fuzz_corpus_test, checkpoint_fuzz_corpus_test):
// runs the fuzz body and the libFuzzer entry point over in-memory inputs with any compiler and
// checks the outcome of each, so a target stays compiled and its seeds stay valid in normal CI.
//
//   NAME_corpus_test               in-memory seeds and malformed inputs only
//   NAME_corpus_test DIR           also: DIR's seed-* files equal the current seeds, and every
//                                  other file in DIR runs without a crash
//   NAME_corpus_test --write DIR   (re)writes the seed-* files into DIR (after a format change)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace psrt::fuzz {

using Bytes = std::vector<std::byte>;

struct Input {
  Bytes bytes;
  std::string expected;  // the outcome the fuzz body reports for it
};
using Inputs = std::map<std::string, Input>;  // by name; seeds' names are their file names
using RunOne = std::function<std::string(std::span<const std::byte>)>;

inline Bytes read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Bytes b(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i)
    b[i] = std::byte(static_cast<unsigned char>(chars[i]));
  return b;
}

inline int corpus_main(int argc, char** argv, const char* name, const Inputs& seeds,
                       const Inputs& malformed, const RunOne& run_one) {
  namespace fs = std::filesystem;
  if (argc == 3 && std::string(argv[1]) == "--write") {
    const fs::path dir = argv[2];
    fs::create_directories(dir);
    for (const auto& [file, seed] : seeds) {
      std::ofstream out(dir / file, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(seed.bytes.data()),
                static_cast<std::streamsize>(seed.bytes.size()));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", (dir / file).c_str());
        return 1;
      }
    }
    std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
    return 0;
  }
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [--write] [CORPUS_DIR]\n", argv[0]);
    return 2;
  }
  int failures = 0;
  std::size_t n = 0;
  for (const Inputs* inputs : {&seeds, &malformed}) {
    for (const auto& [input, in] : *inputs) {
      const std::string got = run_one(in.bytes);
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(in.bytes.data()),
                             in.bytes.size());
      if (got != in.expected) {
        std::fprintf(stderr, "FAIL %s: %s, expected %s\n", input.c_str(), got.c_str(),
                     in.expected.c_str());
        ++failures;
      }
      ++n;
    }
  }
  if (argc == 2) {
    const fs::path dir = argv[1];
    std::size_t others = 0;
    for (const auto& [file, seed] : seeds) {
      if (!fs::exists(dir / file)) {
        std::fprintf(stderr, "FAIL %s is missing from %s\n", file.c_str(), dir.c_str());
        ++failures;
      } else if (read_bytes(dir / file) != seed.bytes) {
        std::fprintf(stderr, "FAIL %s in %s is stale: run `%s --write %s`\n", file.c_str(),
                     dir.c_str(), name, dir.c_str());
        ++failures;
      }
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string file = entry.path().filename().string();
      if (!entry.is_regular_file() || file.starts_with('.') || seeds.count(file)) continue;
      run_one(read_bytes(entry.path()));
      ++others;
    }
    std::printf("%s: %zu seeds checked, %zu other inputs ran\n", dir.c_str(), seeds.size(), others);
  }
  std::printf("%s: %zu in-memory inputs, %d failures\n", name, n, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace psrt::fuzz
