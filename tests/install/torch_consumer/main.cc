// docs/cpp-api.md's LibTorch example: a two-layer network fits a linear target through the
// parameter servers. psrun runs N copies; each draws its own batches.
//   psrun -n 2 -- ./torch_consumer
#include <psrt/psrt.h>
#include <psrt/torch.h>
#include <torch/torch.h>

#include <cstdio>

struct NetImpl : torch::nn::Module {
  NetImpl() {
    hidden = register_module("hidden", torch::nn::Linear(16, 32));
    out = register_module("out", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(torch::Tensor x) {
    psrt::torch::pre_forward(*this);  // waits only for this module's pulled weights
    return out(torch::relu(hidden(x)));
  }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};
TORCH_MODULE(Net);

int main() {
  psrt::Worker worker = psrt::Worker::from_env();
  torch::manual_seed(0);
  Net model;
  psrt::torch::Options options;
  options.set_sgd = true;
  options.sgd = {.lr = 0.05f, .momentum = 0.9f};
  psrt::torch::DistributedOptimizer opt(worker, *model, options);  // rank 0's weights for all

  torch::manual_seed(100 + worker.rank());  // each worker its own data
  const auto target = torch::linspace(-1, 1, 16).unsqueeze(1);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto x = torch::randn({64, 16});
    auto loss = torch::mse_loss(model->forward(x), x.mm(target));
    opt.zero_grad();
    loss.backward();  // each gradient is pushed as soon as autograd produces it
    opt.step();       // returns at once; the next forward waits per module
    (step == 0 ? first : last) = loss.item<double>();
  }
  opt.synchronize();  // the model now holds the servers' final weights
  std::printf("rank %d of %d: loss %.4f -> %.6f\n", worker.rank(), worker.num_workers(), first,
              last);
  worker.shutdown();
  return last < first / 100 ? 0 : 1;
}
