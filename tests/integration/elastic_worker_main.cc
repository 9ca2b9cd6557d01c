// The worker program of the elastic integration tests (tests/integration/elastic_job_test.cc),
// run under psrun with --aggregate sum --lr 1 (or mean). Prints what the test checks against the
// servers' update trace; exits 1 with "FAIL ..." on a mismatch it can see alone.
//
//   elastic_worker rounds --rounds R [--sizes a,b,...] [--slow-rank K --slow-ms M]
//                  [--pace-ms P] [--mean 1]
//     Every key is a slice of its own, initialised to 0. Rank j pushes c * 4^j * (1 + i%3) (with
//     --mean 1: c * 4^j on every element) for key k while the key's version is below R, where
//     c = 1 + v%2 for the version v it computed from (the one it last pulled): a gradient applied
//     in another round than the one after its weights would show. The weights after any round
//     are -(1 + i%3) * T (-T) for one number T: the sum of c * 4^j over the gradients applied so
//     far (of their means). Each push_pull prints
//       STATE <rank> <key> <version> <T> <round_workers> <dropped>
//     (the test checks T against the trace's closed form for that version). Rank K sleeps M ms
//     before each push (a straggler), the others P ms. At the end: DROPPED <rank> <n> and
//     PASS rounds rank <r>.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "psrt/psrt.h"
#include "tests/integration/worker_fail.h"

namespace {

struct Args {
  std::string scenario;
  int rounds = 10;
  std::vector<std::size_t> sizes = {7, 1000};
  int slow_rank = -1;
  int slow_ms = 0;
  int pace_ms = 0;
  bool mean = false;
};

using psrt::test::fail;

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) fail("usage: elastic_worker SCENARIO [--rounds R] [--sizes a,b] ...");
  a.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds")
      a.rounds = std::stoi(v);
    else if (k == "--slow-rank")
      a.slow_rank = std::stoi(v);
    else if (k == "--slow-ms")
      a.slow_ms = std::stoi(v);
    else if (k == "--pace-ms")
      a.pace_ms = std::stoi(v);
    else if (k == "--mean")
      a.mean = v == "1";
    else if (k == "--sizes") {
      a.sizes.clear();
      for (std::size_t p = 0; p < v.size();) {
        auto q = v.find(',', p);
        a.sizes.push_back(std::stoull(v.substr(p, q - p)));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else {
      fail("unknown option " + k);
    }
  }
  return a;
}

float pattern(std::size_t i, bool mean) {
  return mean ? 1.f : static_cast<float>(1 + i % 3);
}

// T of weights -(pattern) * T, checked on every element.
double weight_sum(const std::vector<float>& w, std::size_t key, bool mean) {
  const double t = -static_cast<double>(w[0]) / pattern(0, mean);
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i] != static_cast<float>(-t * pattern(i, mean)))
      fail("key " + std::to_string(key) + ": element " + std::to_string(i) + " is " +
           std::to_string(w[i]) + ", not " + std::to_string(-t * pattern(i, mean)) +
           ": the slice's elements saw different rounds");
  return t;
}

int rounds(psrt::Worker& w, const Args& a) {
  const int rank = w.rank();
  const float scale = std::ldexp(1.f, 2 * rank);  // 4^rank
  std::vector<std::vector<float>> weights, grads;
  std::vector<std::uint64_t> version(a.sizes.size(), 0);
  for (std::size_t k = 0; k < a.sizes.size(); ++k) {
    weights.emplace_back(a.sizes[k], 0.f);
    grads.emplace_back(a.sizes[k]);
    for (std::size_t i = 0; i < a.sizes[k]; ++i)
      grads[k][i] = scale * pattern(i, a.mean);
    w.init(k, weights[k]);
    psrt::Handle h = w.pull(k, weights[k]);
    h.wait();
    version[k] = h.version();
  }
  const auto target = static_cast<std::uint64_t>(a.rounds);
  std::uint64_t dropped = 0;
  for (;;) {
    std::vector<std::size_t> keys;
    for (std::size_t k = 0; k < version.size(); ++k)
      if (version[k] < target) keys.push_back(k);
    if (keys.empty()) break;
    const int pause = rank == a.slow_rank ? a.slow_ms : a.pace_ms;
    if (pause > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    std::vector<psrt::Handle> handles;
    for (auto k : keys) {
      const auto c = static_cast<float>(1 + version[k] % 2);
      for (std::size_t i = 0; i < a.sizes[k]; ++i)
        grads[k][i] = c * scale * pattern(i, a.mean);
      handles.push_back(w.push_pull(k, grads[k], weights[k]));
    }
    for (std::size_t j = 0; j < keys.size(); ++j) {
      const std::size_t k = keys[j];
      handles[j].wait();
      const std::uint64_t v = handles[j].version();
      if (v < version[k])
        fail("key " + std::to_string(k) + ": version went back from " + std::to_string(version[k]) +
             " to " + std::to_string(v));
      version[k] = v;
      dropped += handles[j].dropped();
      std::printf("STATE %d %zu %llu %.9g %u %llu\n", rank, k, static_cast<unsigned long long>(v),
                  weight_sum(weights[k], k, a.mean), handles[j].round_workers(),
                  static_cast<unsigned long long>(handles[j].dropped()));
    }
    std::fflush(stdout);
  }
  std::printf("DROPPED %d %llu\n", rank, static_cast<unsigned long long>(dropped));
  std::printf("PASS rounds rank %d\n", rank);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    psrt::Worker w = psrt::Worker::from_env();
    int rc = 1;
    if (a.scenario == "rounds")
      rc = rounds(w, a);
    else
      fail("unknown scenario " + a.scenario);
    w.shutdown();
    return rc;
  } catch (const psrt::Error& e) {
    fail(e.what());
  }
}
