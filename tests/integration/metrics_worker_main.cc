// The worker program of the live-metrics tests (metrics_prometheus_test.py): every rank
// push_pulls keys of known sizes for a known number of rounds, so that the bytes it pushed are
// exactly sizes x 4 x rounds; one rank sleeps before each round (a straggler). After its rounds a
// rank writes DIR/done.<rank> and holds the job open until DIR/release exists (at most 60 s),
// so that Prometheus scrapes the drained job; then it leaves.
//
//   metrics_worker --rounds R --sizes a,b,... --dir DIR [--slow-rank S --slow-ms M]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "psrt/psrt.h"

namespace {

struct Args {
  int rounds = 10;
  std::vector<std::size_t> sizes = {1000};
  std::string dir;
  int slow_rank = -1;
  int slow_ms = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds") {
      a.rounds = std::stoi(v);
    } else if (k == "--sizes") {
      a.sizes.clear();
      for (std::size_t at = 0; at <= v.size();) {
        auto comma = v.find(',', at);
        if (comma == std::string::npos) comma = v.size();
        a.sizes.push_back(std::stoul(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (k == "--dir") {
      a.dir = v;
    } else if (k == "--slow-rank") {
      a.slow_rank = std::stoi(v);
    } else if (k == "--slow-ms") {
      a.slow_ms = std::stoi(v);
    } else {
      std::fprintf(stderr, "metrics_worker: unknown argument %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    psrt::Worker w = psrt::Worker::from_env();
    std::vector<std::vector<float>> grads, outs;
    for (std::size_t k = 0; k < a.sizes.size(); ++k) {
      std::vector<float> init(a.sizes[k], 1.f);
      w.init(k, init);
      grads.emplace_back(a.sizes[k], 0.5f);
      outs.emplace_back(a.sizes[k], 0.f);
    }
    for (int t = 0; t < a.rounds; ++t) {
      if (w.rank() == a.slow_rank)
        std::this_thread::sleep_for(std::chrono::milliseconds(a.slow_ms));
      std::vector<psrt::Handle> handles;
      for (std::size_t k = 0; k < a.sizes.size(); ++k)
        handles.push_back(w.push_pull(k, grads[k], outs[k]));
      for (auto& h : handles)
        h.wait();
    }
    const std::filesystem::path dir(a.dir);
    std::ofstream(dir / ("done." + std::to_string(w.rank()))) << a.rounds << "\n";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(dir / "release") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::printf("PASS metrics rank %d\n", w.rank());
    w.shutdown();
  } catch (const psrt::Error& e) {
    std::fprintf(stderr, "FAIL %s\n", e.what());
    return 1;
  }
  return 0;
}
