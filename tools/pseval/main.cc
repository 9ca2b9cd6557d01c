// pseval: the evaluator that runs beside a training job. It evaluates every checkpoint that
// pstrain writes into --train-dir on the test set and prints one JSON line per checkpoint:
//   {"checkpoint":"D/ckpt-00000938.pt","step":938,"epoch":1,"test_accuracy":0.85,"test_loss":0.41}
// With --watch it keeps polling until pstrain marks the directory DONE (or --timeout-s passes).
#include <fmt/format.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "psrt/error.h"
#include "psrt/version.h"
#include "pstrain/checkpoint.h"
#include "pstrain/data/dataset.h"
#include "pstrain/evaluate.h"

namespace {

namespace fs = std::filesystem;
using namespace psrt::pstrain;

struct Args {
  std::string train_dir;
  std::string data_dir;
  bool watch = false;
  int poll_ms = 1000;
  double timeout_s = 0;
  int threads = 0;
  std::int64_t batch_size = 1000;
};

int run(const Args& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  if (!a.watch && !fs::is_directory(a.train_dir))
    throw psrt::Error(psrt::ErrorCode::kNotFound,
                      fmt::format("--train-dir {} does not exist (pstrain --train-dir writes "
                                  "checkpoints there; --watch waits for it)",
                                  a.train_dir));
  std::map<std::string, Dataset> test_sets;  // by data set name + dir
  std::set<std::int64_t> done;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    // DONE is written after the last checkpoint: seen before listing, nothing can follow.
    const bool finished = fs::exists(fs::path(a.train_dir) / "DONE");
    for (const auto& ck : list_checkpoints(a.train_dir)) {
      if (done.count(ck.step)) continue;
      const std::string dir = a.data_dir.empty() ? ck.data_dir : a.data_dir;
      const std::string id = fmt::format("{}|{}|{}", ck.dataset, dir, ck.seed);
      if (!test_sets.count(id)) {
        SyntheticSpec synthetic;  // the test split pstrain used: it depends on the seed only
        synthetic.seed = ck.seed;
        test_sets[id] = load_dataset(ck.dataset, dir, synthetic).test;
      }
      auto model = make_model(ck.model, ck.spec);
      load_checkpoint(ck, *model, nullptr);
      const EvalResult r = evaluate(*model, test_sets[id], a.batch_size);
      nlohmann::json line{{"checkpoint", ck.weights}, {"step", ck.step},
                          {"epoch", ck.epoch},        {"test_accuracy", r.accuracy},
                          {"test_loss", r.loss},      {"digest", ck.digest}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      done.insert(ck.step);
    }
    if (!a.watch || finished) break;
    if (a.timeout_s > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            a.timeout_s) {
      std::fprintf(stderr, "pseval: --timeout-s %.0f passed before %s was marked DONE\n",
                   a.timeout_s, a.train_dir.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(a.poll_ms));
  }
  if (done.empty()) {
    std::fprintf(stderr, "pseval: no checkpoint in %s\n", a.train_dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "pseval: evaluates every pstrain checkpoint in a directory on the test set, one "
      "JSON line per checkpoint"};
  app.set_version_flag("--version", PSRT_VERSION, "print psrt's version and exit");
  app.add_option("--train-dir", a.train_dir, "pstrain's --train-dir")->required();
  app.add_option("--data-dir", a.data_dir,
                 "the test data's directory (default: the one the checkpoint names)");
  app.add_flag("--watch", a.watch, "keep evaluating new checkpoints until training is DONE");
  app.add_option("--poll-ms", a.poll_ms, "how often --watch looks for new checkpoints")
      ->capture_default_str()
      ->check(CLI::Range(10, 600000));
  app.add_option("--timeout-s", a.timeout_s, "give up --watch after this long (0 = never)")
      ->capture_default_str();
  app.add_option("--threads", a.threads, "intra-op threads (0 = LibTorch's default)")
      ->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "evaluation batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const psrt::Error& e) {
    std::fprintf(stderr, "pseval: error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "pseval: error: LibTorch: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pseval: error: %s\n", e.what());
    return 1;
  }
}
