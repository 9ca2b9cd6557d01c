#include "pstrain/data/cifar.h"

#include <cstring>
#include <filesystem>

#include "psrt/error.h"
#include "pstrain/data/file_bytes.h"
#include "pstrain/data/normalize.h"

namespace psrt::pstrain {
namespace {

constexpr int64_t kChannels = 3;
constexpr int64_t kSide = 32;
constexpr int64_t kPixels = kChannels * kSide * kSide;  // 3072
constexpr int64_t kRecord = 1 + kPixels;                // 3073
constexpr int64_t kClasses = 10;
constexpr const char* kDefaultDir = "./data/cifar-10-batches-bin";
constexpr const char* kHowToGet =
    "download cifar-10-binary.tar.gz (the binary version) from "
    "https://www.cs.toronto.edu/~kriz/cifar.html, extract it, and pass --data-dir to the "
    "extracted cifar-10-batches-bin directory";

}  // namespace

Dataset read_cifar_batches(const std::vector<std::string>& paths, bool train) {
  std::vector<torch::Tensor> records;
  records.reserve(paths.size());
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      throw Error(ErrorCode::kNotFound, "cifar10: missing " + path + "; " + kHowToGet);
    }
    std::vector<uint8_t> bytes = read_file_bytes(path);
    const auto size = static_cast<int64_t>(bytes.size());
    if (size == 0 || size % kRecord != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "cifar10: '" + path + "' is " + std::to_string(size) +
                      " bytes, not a positive multiple of the 3073-byte record (1 label byte + "
                      "3072 pixel bytes); is it a CIFAR-10 binary batch?");
    }
    torch::Tensor file = torch::empty({size / kRecord, kRecord}, torch::kUInt8);
    std::memcpy(file.data_ptr<uint8_t>(), bytes.data(), bytes.size());
    const torch::Tensor bad = (file.select(1, 0) >= kClasses).nonzero();
    if (bad.size(0) > 0) {
      const auto index = bad[0][0].item<int64_t>();
      throw Error(ErrorCode::kInvalidArgument,
                  "cifar10: '" + path + "' record " + std::to_string(index) + " has label " +
                      std::to_string(file[index][0].item<int>()) + ", outside [0, 10)");
    }
    records.push_back(std::move(file));
  }
  if (records.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "cifar10: no batch files given");
  }
  const torch::Tensor all = records.size() == 1 ? records[0] : torch::cat(records);

  Dataset out;
  out.labels = all.select(1, 0).to(torch::kInt64);
  out.images = normalize_pixels(all.narrow(1, 1, kPixels).reshape({-1, kChannels, kSide, kSide}),
                                {{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}});
  out.num_classes = kClasses;
  out.name = "cifar10";
  out.augment = train;
  return out;
}

DataSplit load_cifar10(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path root = dir.empty() ? fs::path(kDefaultDir) : fs::path(dir);
  std::error_code ec;
  // Also accept the directory the archive was extracted into.
  if (!fs::exists(root / "data_batch_1.bin", ec) &&
      fs::exists(root / "cifar-10-batches-bin" / "data_batch_1.bin", ec)) {
    root /= "cifar-10-batches-bin";
  }
  std::vector<std::string> train;
  for (int i = 1; i <= 5; ++i) {
    train.push_back((root / ("data_batch_" + std::to_string(i) + ".bin")).string());
  }
  return {read_cifar_batches(train, true),
          read_cifar_batches({(root / "test_batch.bin").string()}, false)};
}

}  // namespace psrt::pstrain
