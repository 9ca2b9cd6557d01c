// docs/cpp-api.md's example: a complete psrt worker. Each worker fits w to a target by SGD on
// 0.5 * |w - target|^2 through the parameter servers; psrun runs N copies of it.
//   psrun -n 2 -- ./consumer
#include <psrt/psrt.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  psrt::Worker worker = psrt::Worker::from_env();  // joins the job psrun started
  const psrt::Key key = 1;
  std::vector<float> w(1000, 0.f), grad(w.size()), target(w.size());
  for (std::size_t i = 0; i < w.size(); ++i)
    target[i] = static_cast<float>(i % 10);

  worker.set_optimizer({.lr = 0.5f});  // the same on every worker
  worker.init(key, w);                 // the first init in the job wins
  worker.pull(key, w).wait();          // every worker starts from the stored weights

  for (int step = 0; step < 30; ++step) {
    for (std::size_t i = 0; i < w.size(); ++i)
      grad[i] = w[i] - target[i];
    worker.push_pull(key, grad, w).wait();  // w = weights after this round (sync mode)
  }
  float err = 0.f;
  for (std::size_t i = 0; i < w.size(); ++i)
    err = std::fmax(err, std::fabs(w[i] - target[i]));
  std::printf("rank %d of %d: max |w - target| = %.3g\n", worker.rank(), worker.num_workers(), err);
  worker.shutdown();
  return err < 1e-3f ? 0 : 1;
}
