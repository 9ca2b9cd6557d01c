#include "pstrain/evaluate.h"

namespace psrt::pstrain {

EvalResult evaluate(ClassifierImpl& model, const Dataset& data, std::int64_t batch_size) {
  const bool was_training = model.is_training();
  model.eval();
  ::torch::NoGradGuard no_grad;
  const auto params = model.parameters();
  const ::torch::Device device =
      params.empty() ? ::torch::Device(::torch::kCPU) : params.front().device();
  const std::int64_t n = data.images.size(0);
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < n; begin += batch_size) {
    const std::int64_t end = std::min(n, begin + batch_size);
    auto x = data.images.slice(0, begin, end).to(device);
    auto y = data.labels.slice(0, begin, end).to(device);
    auto logits = model.forward(x);
    loss_sum +=
        ::torch::nn::functional::cross_entropy(
            logits, y, ::torch::nn::functional::CrossEntropyFuncOptions().reduction(::torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<std::int64_t>();
  }
  model.train(was_training);
  return {n ? loss_sum / static_cast<double>(n) : 0.0,
          n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0};
}

}  // namespace psrt::pstrain
