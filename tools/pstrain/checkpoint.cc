#include "pstrain/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/fnv.h"
#include "psrt/error.h"

namespace psrt::pstrain {
namespace fs = std::filesystem;
namespace {

std::string stem_of(std::int64_t step) {
  return fmt::format("ckpt-{:08d}", step);
}

void write_atomically(const fs::path& path, const std::function<void(const std::string&)>& write) {
  const fs::path tmp = path.string() + ".tmp";
  try {
    write(tmp.string());
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(ErrorCode::kSystem,
                fmt::format("cannot write checkpoint {}: {}", path.string(), e.what()));
  }
}

// Module::save with CPU copies of every parameter and buffer: the file reads the same whichever
// device trained the model, and loads on a machine without that device (pseval, --device cpu).
// Same keys and nesting as Module::save, so Module::load reads it.
void save_on_cpu(const ::torch::nn::Module& module, ::torch::serialize::OutputArchive& archive) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    const auto& t = p.value();
    archive.write(p.key(), t.detach().to(::torch::kCPU).requires_grad_(t.requires_grad()));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false))
    archive.write(b.key(), b.value().detach().to(::torch::kCPU), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    ::torch::serialize::OutputArchive nested(archive.compilation_unit());
    save_on_cpu(*child.value(), nested);
    archive.write(child.key(), nested);
  }
}

}  // namespace

std::string weights_digest(const ::torch::nn::Module& model) {
  std::uint64_t h = kFnv1aOffset;
  for (const auto& p : model.parameters()) {
    auto t = p.detach().to(::torch::kCPU).contiguous();  // no copy for a CPU tensor
    h = fnv1a(t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size(), h);
  }
  return fmt::format("{:016x}", h);
}

void save_checkpoint(const std::string& dir, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer* local, CheckpointInfo info) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(ErrorCode::kSystem,
                fmt::format("cannot create --train-dir {}: {}", dir, ec.message()));
  const fs::path base = fs::path(dir) / stem_of(info.step);
  write_atomically(base.string() + ".pt", [&](const std::string& tmp) {
    ::torch::serialize::OutputArchive archive;
    save_on_cpu(model, archive);
    archive.save_to(tmp);
  });
  if (local)
    write_atomically(base.string() + ".opt.pt", [&](const std::string& tmp) {
      ::torch::serialize::OutputArchive archive;
      local->save(archive);
      archive.save_to(tmp);
    });
  nlohmann::json j{
      {"step", info.step},
      {"epoch", info.epoch},
      {"model", info.model},
      {"dataset", info.dataset},
      {"data_dir", info.data_dir},
      {"spec", {info.spec.channels, info.spec.height, info.spec.width, info.spec.classes}},
      {"workers", info.workers},
      {"seed", info.seed},
      {"batch_size", info.batch_size},
      {"digest", weights_digest(model)}};
  write_atomically(base.string() + ".json", [&](const std::string& tmp) {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    out.close();
    if (!out) throw std::runtime_error("write failed");
  });
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  static const std::regex name(R"(ckpt-(\d+)\.json)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, name)) continue;
    CheckpointInfo c;
    try {
      std::ifstream in(entry.path());
      const nlohmann::json j = nlohmann::json::parse(in);
      const auto& spec = j.at("spec");
      if (!spec.is_array() || spec.size() != 4) throw std::runtime_error("spec is not [C,H,W,K]");
      c.step = j.at("step").get<std::int64_t>();
      c.epoch = j.at("epoch").get<std::int64_t>();
      c.model = j.at("model").get<std::string>();
      c.dataset = j.at("dataset").get<std::string>();
      c.data_dir = j.value("data_dir", std::string());
      c.spec = {spec[0].get<std::int64_t>(), spec[1].get<std::int64_t>(),
                spec[2].get<std::int64_t>(), spec[3].get<std::int64_t>()};
      c.workers = j.value("workers", 1);
      c.batch_size = j.value("batch_size", std::int64_t{0});
      c.seed = j.value("seed", std::uint64_t{1});
      c.digest = j.value("digest", std::string());
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("checkpoint description {} is not one pstrain wrote ({}); remove "
                              "it, or use another directory",
                              entry.path().string(), e.what()));
    }
    c.weights = (fs::path(dir) / (stem_of(c.step) + ".pt")).string();
    found.push_back(std::move(c));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

std::optional<CheckpointInfo> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void load_checkpoint(const CheckpointInfo& info, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer* local, ::torch::Device device) {
  try {
    // Loaded straight onto `device`: Module::load would move a parameter whose device differs
    // from the file's to the file's device.
    ::torch::serialize::InputArchive archive;
    archive.load_from(info.weights, device);
    model.load(archive);
    const std::string opt_path = info.weights.substr(0, info.weights.size() - 3) + ".opt.pt";
    if (local && fs::exists(opt_path)) {
      ::torch::serialize::InputArchive opt_archive;
      opt_archive.load_from(opt_path, device);
      local->load(opt_archive);
    }
  } catch (const c10::Error& e) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot load checkpoint {} into model '{}': {}", info.weights,
                            info.model, e.what_without_backtrace()));
  }
}

}  // namespace psrt::pstrain
