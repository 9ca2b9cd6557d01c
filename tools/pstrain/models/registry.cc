#include <fmt/format.h>

#include <functional>
#include <utility>

#include "psrt/error.h"
#include "pstrain/models/cifar_resnet.h"
#include "pstrain/models/lenet.h"
#include "pstrain/models/model.h"
#include "pstrain/models/resnet.h"

namespace psrt::pstrain {
namespace {

using Factory = std::function<std::shared_ptr<ClassifierImpl>(const ModelSpec&)>;

const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> table = [] {
    std::vector<std::pair<std::string, Factory>> t;
    t.emplace_back("lenet", [](const ModelSpec& s) { return std::make_shared<LeNetImpl>(s); });
    for (int64_t depth : {18, 34, 50})
      t.emplace_back(fmt::format("resnet{}", depth), [depth](const ModelSpec& s) {
        return std::make_shared<ResNetImpl>(torchvision_resnet_config(depth), s);
      });
    for (int64_t depth : {20, 32, 56, 110})
      t.emplace_back(fmt::format("resnet{}", depth), [depth](const ModelSpec& s) {
        return std::make_shared<ResNetImpl>(cifar_resnet_config(depth), s);
      });
    return t;
  }();
  return table;
}

}  // namespace

std::shared_ptr<ClassifierImpl> make_model(const std::string& name, const ModelSpec& spec) {
  for (const auto& [known, factory] : factories())
    if (known == name) return factory(spec);
  throw Error(ErrorCode::kInvalidArgument, fmt::format("unknown model '{}'; known models: {}", name,
                                                       fmt::join(model_names(), ", ")));
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& entry : factories())
      n.push_back(entry.first);
    return n;
  }();
  return names;
}

void check_spec(const std::string& model, const ModelSpec& spec, int64_t min_side,
                const std::string& why) {
  const std::pair<const char*, int64_t> counts[] = {{"channels", spec.channels},
                                                    {"height", spec.height},
                                                    {"width", spec.width},
                                                    {"classes", spec.classes}};
  for (const auto& [field, value] : counts)
    if (value < 1)
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{} cannot be built for {} {}: it must be at least 1", model, field, value));
  for (const auto& [field, value] : {counts[1], counts[2]})
    if (value < min_side)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} cannot take {}x{}x{} images: {} {} is below {}{}{}", model,
                              spec.channels, spec.height, spec.width, field, value, min_side,
                              why.empty() ? "" : "; ", why));
}

void check_input(const std::string& model, const ModelSpec& spec, const ::torch::Tensor& x,
                 bool exact_size) {
  const bool ok = x.dim() == 4 && x.size(0) >= 1 && x.size(1) == spec.channels &&
                  (!exact_size || (x.size(2) == spec.height && x.size(3) == spec.width));
  if (ok) return;
  const std::string expected =
      exact_size ? fmt::format("[B, {}, {}, {}]", spec.channels, spec.height, spec.width)
                 : fmt::format("[B, {}, H, W]", spec.channels);
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("{} takes images {} but got a tensor of shape [{}]", model, expected,
                          fmt::join(x.sizes().begin(), x.sizes().end(), ", ")));
}

}  // namespace psrt::pstrain
