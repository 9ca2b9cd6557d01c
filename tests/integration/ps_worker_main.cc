// The worker program the integration tests run under psrun: each scenario drives the public
// worker API and checks exact results itself (integer-valued gradients, so every float sum is
// exact). Prints "PASS <scenario> rank <r>" on success; exits 1 with a message on a mismatch.
//
//   ps_worker exact --rounds R [--sizes a,b,...]   sync, mean, lr 1: closed form every round,
//                                                  and the version a pull returned = the round
//                                                  = version(key); version of an unknown key:
//                                                  kNotFound
//   ps_worker async|ssp --rounds R                 final = init - sum of every push
//   ps_worker elastic --stop-file F                rank 2 leaves and rejoins as a new worker
//   ps_worker kill --rounds R                      rank 2 SIGKILLs itself after R rounds
//   ps_worker lossy --rounds R --kill-after K      sync, sum, lr 1, 3 workers, --on-worker-loss
//                                                  continue: rank 2 SIGKILLs itself after K
//                                                  rounds; ranks 0, 1 check every round against
//                                                  the closed form of the ranks live in it
//   ps_worker chaos --rounds R --pace-ms M         sync, sum, lr 1, up to 4 workers, killed
//                                                  from outside at random (replica_job_test):
//                                                  rank j pushes 4^j * (1 + i%3) * (1 + t%3), so
//                                                  each round's drop names the ranks in it; every
//                                                  rank prints ROUND t after round t, survivors
//                                                  print each rank's last round (CHAOS lines)
//   ps_worker exact ... --pace-ms M                sleeps M ms after each round (a job that
//                                                  lasts, for kills from outside)
//   ps_worker exact ... --push-then-pull 1         each round is PUSH then PULL (with
//                                                  --kill-server: killed once the round is
//                                                  applied, before the pulls)
//   ps_worker exact|async ... --kill-server S --kill-after K
//                                                  rank 0 SIGKILLs server S (a sibling under
//                                                  psrun) with round K's push_pulls in flight
//   ps_worker resume --rounds R --kill-after K     rank 0 SIGKILLs itself after K rounds; a
//     [--request-round Q]                          rerun resumes from the checkpoint; rank 0
//     [--workers-before N]                         asks for one of round Q at the start; the
//                                                  rounds before the resume round had N
//                                                  workers (psrun --min-workers)
//   ps_worker attack --rounds R                    rank 0 sends bad input (attacker.cc); ranks
//                                                  1, 2 check sum-mode rounds stay exact
//   ps_worker guard                                2 workers, --skip-nonfinite: a NaN in one
//                                                  slice leaves that slice exactly unchanged
//   ps_worker clip [--max-norm X]                  2 workers, clipping to norm 1 (psrun's
//                                                  --max-grad-norm, or set_optimizer with X)
//   ps_worker invariants --case C --rounds R       rank 0 attacks a protocol invariant
//                                                  (invariant_attacks.cc); ranks 1, 2 as attack
//   ps_worker stale --stop-file F                  async, 2 workers: rank 0 (attacker.cc) pushes
//                                                  on a connection of an earlier registration
//                                                  of its rank; rank 1 holds key 0 (zeros)
//   ps_worker victim --stop-file F --rounds R      sum mode, lr 1: after init and a barrier
//                                                  each rank writes F.ready<rank> and waits for
//                                                  F.go (an attack runs meanwhile), then checks
//                                                  every round exactly and that no worker left
//   ps_worker adam --rounds R [--kill-after K]     sync, psrun's --optimizer adam|adamw (from the
//     [--kill-server S]                            environment, as the servers read it): every
//                                                  round's weights equal, bit for bit, the fused
//                                                  kernel replayed here on every rank's
//                                                  gradients; a rerun resumes (checkpoints);
//                                                  --kill-after alone: rank 0 SIGKILLs itself
//                                                  after K rounds of a fresh run; with
//                                                  --kill-server: rank 0 kills server S then
//   ps_worker hold --stop-file F [--start-file G]  sum, lr 1: rounds of 1s, each checked
//                                                  exactly, until F exists; joins only once G
//                                                  exists (admission tests attack meanwhile)
//   ps_worker quota                                PSRT_MAX_KEYS_PER_WORKER=3: the 4th key
//                                                  is refused, naming the knob
//   ps_worker aggregate --rounds R [--sizes a,b]   3 workers, keys of KeyUpdate kMean and kSum
//                                                  beside an optimizer key: every round's value
//                                                  is exactly the mean / sum of its gradients;
//                                                  an init with another KeyUpdate is refused
//   ps_worker exit                                 one exact round, then std::exit(0) without
//                                                  shutdown() (the Worker is never destroyed)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kernels/fused_adam.h"
#include "ps/job_checkpoint.h"
#include "psrt/psrt.h"
#include "runtime/server_process.h"
#include "tests/integration/attacker.h"
#include "tests/integration/invariant_attacks.h"
#include "tests/integration/worker_fail.h"

namespace {

using psrt::test::fail;

struct Args {
  std::string scenario;
  int rounds = 3;
  int kill_after = -1;
  int request_round = 0;   // resume: rank 0 asks for a checkpoint of this round at the start
  int workers_before = 0;  // resume: the rounds before the resume round had this many workers
  std::vector<std::size_t> sizes = {1, 7, 1000, 4099};
  std::string stop_file;
  std::string start_file;
  float max_norm = 0.f;         // clip: > 0 sets the optimizer through the API
  int pace_ms = 0;              // exact: sleep after each round
  int kill_server = -1;         // exact: rank 0 kills this server at --kill-after
  int kill_signal = SIGKILL;    // the signal it sends; SIGSTOP: SIGCONT once the rounds are done
  bool push_then_pull = false;  // exact: PUSH, then PULL, instead of PUSH_PULL
  std::string attack_case;      // invariants: which one
};

// Aggregate-only keys (psrt/key_update.h): rank r pushes 3 * (r + 1) * (1 + i % 4) + t in round t,
// so the sum and the mean over 3 workers are integers, exact in fp32.
void aggregate(psrt::Worker& w, const Args& a) {
  const int n = w.num_workers();
  const std::size_t size = a.sizes.back();
  const psrt::Key mean_key = 1001, sum_key = 1002;
  std::vector<float> zeros(size, 0.f), grad(size), out(size);
  w.init(mean_key, zeros, psrt::KeyUpdate::kMean);
  w.init(sum_key, zeros, psrt::KeyUpdate::kSum);
  try {
    w.init(sum_key, zeros, psrt::KeyUpdate::kOptimizer);
    fail("an init of a sum key as an optimizer key was accepted");
  } catch (const psrt::Error& e) {
    if (std::string(e.what()).find("but it exists as an aggregate-only key (sum)") ==
        std::string::npos)
      fail(std::string("refused init: ") + e.what());
  }
  for (int t = 0; t < a.rounds; ++t) {
    for (const psrt::Key key : {mean_key, sum_key}) {
      for (std::size_t i = 0; i < size; ++i)
        grad[i] = static_cast<float>(3 * (w.rank() + 1) * (1 + static_cast<int>(i % 4)) + t);
      w.push_pull(key, grad, out).wait();
      for (std::size_t i = 0; i < size; ++i) {
        float sum = 0.f;
        for (int r = 0; r < n; ++r)
          sum += static_cast<float>(3 * (r + 1) * (1 + static_cast<int>(i % 4)) + t);
        const float want = key == sum_key ? sum : sum / static_cast<float>(n);
        if (out[i] != want)
          fail("round " + std::to_string(t) + " key " + std::to_string(key) + " element " +
               std::to_string(i) + ": " + std::to_string(out[i]) + " != " + std::to_string(want));
      }
    }
  }
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) fail("usage: ps_worker SCENARIO [--rounds R] [--sizes a,b] [--stop-file F]");
  a.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds")
      a.rounds = std::stoi(v);
    else if (k == "--kill-after")
      a.kill_after = std::stoi(v);
    else if (k == "--request-round")
      a.request_round = std::stoi(v);
    else if (k == "--workers-before")
      a.workers_before = std::stoi(v);
    else if (k == "--stop-file")
      a.stop_file = v;
    else if (k == "--case")
      a.attack_case = v;
    else if (k == "--start-file")
      a.start_file = v;
    else if (k == "--max-norm")
      a.max_norm = std::stof(v);
    else if (k == "--pace-ms")
      a.pace_ms = std::stoi(v);
    else if (k == "--push-then-pull")
      a.push_then_pull = v == "1";
    else if (k == "--kill-server")
      a.kill_server = std::stoi(v);
    else if (k == "--kill-signal")
      a.kill_signal = std::stoi(v);
    else if (k == "--sizes") {
      a.sizes.clear();
      for (std::size_t p = 0; p < v.size();) {
        auto q = v.find(',', p);
        a.sizes.push_back(std::stoull(v.substr(p, q - p)));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else
      fail("unknown option " + k);
  }
  return a;
}

// The pid of server `rank` of this job: a process started by the same psrun with PSRT_ROLE=server
// and that PSRT_RANK in its environment.
pid_t find_server(int rank) {
  const std::string want_role = "PSRT_ROLE=server", want_rank = "PSRT_RANK=" + std::to_string(rank);
  const pid_t psrun = ::getppid();
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::FILE* f = std::fopen((e.path() / "stat").c_str(), "r");
    if (!f) continue;
    int pid = 0, ppid = 0;
    char state = 0;
    const int got = std::fscanf(f, "%d %*s %c %d", &pid, &state, &ppid);
    std::fclose(f);
    if (got != 3 || ppid != psrun) continue;
    std::FILE* env = std::fopen((e.path() / "environ").c_str(), "r");
    if (!env) continue;
    std::string all;
    for (int c; (c = std::fgetc(env)) != EOF;)
      all.push_back(static_cast<char>(c));
    std::fclose(env);
    bool role = false, rank_ok = false;
    for (std::size_t p = 0; p < all.size();) {
      const std::size_t q = all.find('\0', p);
      const std::string var = all.substr(p, q == std::string::npos ? std::string::npos : q - p);
      role = role || var == want_role;
      rank_ok = rank_ok || var == want_rank;
      if (q == std::string::npos) break;
      p = q + 1;
    }
    if (role && rank_ok) return pid;
  }
  return -1;
}

// Sends `sig` (SIGKILL, SIGSTOP) to server `rank` of this job in round t + 1 (its operations in
// flight); returns its pid.
pid_t kill_server(int rank, int t, int sig) {
  const pid_t server = find_server(rank);
  if (server <= 0) fail("server " + std::to_string(rank) + " not found under psrun");
  std::printf("KILLING server %d (pid %d) in round %d with signal %d\n", rank, server, t + 1, sig);
  std::fflush(stdout);
  ::kill(server, sig);
  return server;
}

float init_value(std::size_t i) {
  return static_cast<float>(i % 5);
}

void check_all(const std::vector<float>& got, std::size_t key, const char* what,
               double (*expect)(std::size_t i, const void*), const void* ctx) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = expect(i, ctx);
    if (got[i] != static_cast<float>(e))
      fail("key " + std::to_string(key) + " " + what + ": element " + std::to_string(i) + " is " +
           std::to_string(got[i]) + ", expected " + std::to_string(e));
  }
}

// A key that no scenario initialises.
constexpr psrt::Key kUnknownKey = 987654321;

// Sync, mean over N workers, lr 1: after round t every element drops by
// mean_r((r+1)(t+1) + i%7) = (t+1)(N+1)/2 + i%7. A resumed job's rounds before `first_round`
// had --workers-before workers when given.
void exact(psrt::Worker& w, const Args& a, int first_round) {
  const int n = w.num_workers();
  const int n_before = a.workers_before > 0 ? a.workers_before : n;
  std::map<std::size_t, std::vector<float>> weights, grads;
  for (std::size_t k = 0; k < a.sizes.size(); ++k) {
    std::vector<float> v(a.sizes[k]);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = init_value(i);
    w.init(k, v);
    weights[k].resize(v.size());
    grads[k].resize(v.size());
  }
  // The version a pull returns is the slices' update count: the round (a resumed job's too).
  auto check_version = [](const psrt::Handle& h, std::size_t key, int round) {
    if (h.version() != static_cast<std::uint64_t>(round))
      fail("key " + std::to_string(key) + ": the pull returned version " +
           std::to_string(h.version()) + ", expected round " + std::to_string(round));
  };
  // Worker::version(key): the servers' version of the key now, asked without pulling it. No
  // round can be applied before this worker's first push, so it is the start round exactly,
  // before the first pull and after it.
  auto check_key_version = [&w](std::size_t key, int round, const char* when) {
    const std::uint64_t v = w.version(key);
    if (v != static_cast<std::uint64_t>(round))
      fail("key " + std::to_string(key) + ": version(key) " + when + " is " + std::to_string(v) +
           ", expected round " + std::to_string(round));
  };
  for (auto& [k, v] : weights)
    check_key_version(k, first_round, "before the first pull");
  for (auto& [k, v] : weights) {
    psrt::Handle h = w.pull(k, v);
    h.wait();
    check_version(h, k, first_round);
    check_key_version(k, first_round, "after the first pull");
  }
  // A key no worker initialised: the scheduler's kNotFound, as for a pull of it.
  try {
    w.version(kUnknownKey);
    fail("version() of a key never initialised returned");
  } catch (const psrt::Error& e) {
    if (e.code() != psrt::ErrorCode::kNotFound ||
        std::string(e.what()).find("unknown key " + std::to_string(kUnknownKey)) ==
            std::string::npos)
      fail(std::string("version() of an unknown key: ") + e.what());
  }
  struct Ctx {
    int n, rounds, n_before, first_round;
  };
  auto closed_form = [](std::size_t i, const void* c) {
    auto* x = static_cast<const Ctx*>(c);
    double sum = 0;
    for (int u = 0; u < x->rounds; ++u)
      sum += (u + 1) * ((u < x->first_round ? x->n_before : x->n) + 1) / 2.0 +
             static_cast<double>(i % 7);
    return init_value(i) - sum;
  };
  Ctx start{n, first_round, n_before, first_round};
  for (auto& [k, v] : weights)
    check_all(v, k, "at the start", closed_form, &start);
  pid_t stopped = -1;
  for (int t = first_round; t < a.rounds; ++t) {
    std::vector<psrt::Handle> hs;
    for (auto& [k, g] : grads) {
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 7));
      hs.push_back(a.push_then_pull ? w.push(k, g) : w.push_pull(k, g, weights[k]));
    }
    const bool kill_now = a.kill_server >= 0 && a.kill_after == t + 1;
    if (a.push_then_pull) {
      // Every push acknowledged (received); after the barrier and a pause the round is applied
      // and on the backup, and only then is the server killed: the pushes each worker still
      // keeps for a re-send were applied already, and must not be applied again.
      for (auto& h : hs)
        h.wait();
      if (kill_now) {
        w.barrier();
        if (w.rank() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          stopped = kill_server(a.kill_server, t, a.kill_signal);
        }
        w.barrier();
      }
      hs.clear();
      for (auto& [k, v] : weights)
        hs.push_back(w.pull(k, v));
    } else if (kill_now && w.rank() == 0) {
      stopped = kill_server(a.kill_server, t, a.kill_signal);
    }
    for (std::size_t i = 0; i < hs.size(); ++i) {
      hs[i].wait();
      check_version(hs[i], i, t + 1);
    }
    // Sync: round t + 2 needs this worker's next gradient, so the servers hold round t + 1.
    for (auto& [k, v] : weights)
      check_key_version(k, t + 1, "after the round's pull");
    if (a.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.pace_ms));
    Ctx ctx{n, t + 1, n_before, first_round};
    for (auto& [k, v] : weights)
      check_all(v, k, "after a sync round", closed_form, &ctx);
    if (a.kill_server < 0 && a.kill_after == t + 1 && w.rank() == 0 &&
        first_round == 0) {  // in a fresh run only
      std::printf("KILLING after round %d\n", t + 1);
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }
  // A stopped server wakes up to find itself out of the job, and ends.
  if (stopped > 0 && a.kill_signal == SIGSTOP) ::kill(stopped, SIGCONT);
}

// Sync, sum, lr 1: rank r pushes (r+1)(t+1) + i%7 in round t. Rank 2 is SIGKILLed after
// round K (the job runs with --on-worker-loss continue), so rounds before K subtract the sum over
// ranks 0..2 and later rounds the sum over ranks 0 and 1 only; ranks 0 and 1 check every element
// of every key after every round.
void lossy(psrt::Worker& w, const Args& a) {
  if (w.num_workers() != 3) fail("lossy needs 3 workers");
  std::map<std::size_t, std::vector<float>> weights, grads;
  for (std::size_t k = 0; k < a.sizes.size(); ++k) {
    std::vector<float> v(a.sizes[k]);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = init_value(i);
    w.init(k, v);
    weights[k].resize(v.size());
    grads[k].resize(v.size());
  }
  w.barrier();
  for (int t = 0; t < a.rounds; ++t) {
    std::vector<psrt::Handle> hs;
    for (auto& [k, g] : grads) {
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 7));
      hs.push_back(w.push_pull(k, g, weights[k]));
    }
    for (auto& h : hs)
      h.wait();
    for (auto& [k, v] : weights) {
      for (std::size_t i = 0; i < v.size(); ++i) {
        double drop = 0;
        for (int u = 0; u <= t; ++u) {
          const int live = u < a.kill_after ? 3 : 2;  // ranks 0..live-1 pushed in round u
          for (int r = 0; r < live; ++r)
            drop += (r + 1) * (u + 1) + static_cast<double>(i % 7);
        }
        if (v[i] != static_cast<float>(init_value(i) - drop))
          fail("key " + std::to_string(k) + " round " + std::to_string(t) + " element " +
               std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " +
               std::to_string(init_value(i) - drop));
      }
    }
    if (w.rank() == 2 && t + 1 == a.kill_after) {
      std::printf("KILLING after round %d\n", t + 1);
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }
}

// Chaos (issue 18, 5a): workers and servers SIGKILLed from outside while the rounds run. Rank j's
// gradient is 4^j * (1 + i%3) * (1 + t%3), so the drop of element i in round t, divided by
// (1 + i%3) * (1 + t%3), is the sum of 4^j over the ranks in the round: base-4 digits 0 or 1
// name them; a 2 is a doubled push, a missing survivor a lost one. Every round is checked: its
// drop decodes to a set holding this rank, the same set for every element of a key, and a rank
// once out of a key stays out of every key from the next round on (the scheduler dropped it).
// The final weights must equal the closed form of the rounds each rank was in, which each
// survivor prints (CHAOS worker j last round MIN MAX, over the keys: MAX - MIN <= 1, the round
// in flight at a loss holds the lost worker in the keys it had pushed) for the test to check
// against the rounds the killed workers printed and against the other survivors.
void chaos(psrt::Worker& w, const Args& a) {
  const int n = w.num_workers();
  if (n > 4) fail("chaos needs at most 4 workers");
  auto factor = [](std::size_t i, int t) {
    return (1.0 + static_cast<double>(i % 3)) * (1.0 + t % 3);
  };
  std::map<std::size_t, std::vector<float>> weights, prev, grads;
  std::map<std::size_t, std::vector<int>> last;  // key -> rank -> last round it was in (-1)
  for (std::size_t k = 0; k < a.sizes.size(); ++k) {
    std::vector<float> v(a.sizes[k]);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = init_value(i);
    w.init(k, v);
    prev[k] = v;
    weights[k].resize(v.size());
    grads[k].resize(v.size());
    last[k].assign(static_cast<std::size_t>(n), -1);
  }
  w.barrier();
  std::vector<bool> out(static_cast<std::size_t>(n), false);  // dropped before this round
  for (int t = 0; t < a.rounds; ++t) {
    std::vector<psrt::Handle> hs;
    for (auto& [k, g] : grads) {
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>((1 << (2 * w.rank())) * factor(i, t));
      hs.push_back(w.push_pull(k, g, weights[k]));
    }
    for (auto& h : hs)
      h.wait();
    std::vector<bool> absent(static_cast<std::size_t>(n), false);
    for (auto& [k, v] : weights) {
      const std::string at = "key " + std::to_string(k) + " round " + std::to_string(t);
      const double mask = (prev[k][0] - v[0]) / factor(0, t);
      int bits = static_cast<int>(mask);
      if (mask != bits || bits <= 0 || bits >= (1 << (2 * n)))
        fail(at + ": drop " + std::to_string(mask) + " names no set of ranks");
      for (std::size_t i = 0; i < v.size(); ++i)
        if (prev[k][i] - v[i] != static_cast<float>(bits * factor(i, t)))
          fail(at + " element " + std::to_string(i) + ": drop " +
               std::to_string(prev[k][i] - v[i]) + ", expected " +
               std::to_string(bits * factor(i, t)) + " (ranks mask " + std::to_string(bits) + ")");
      for (int j = 0; j < n; ++j) {
        const int digit = (bits >> (2 * j)) & 3;
        if (digit > 1)
          fail(at + ": rank " + std::to_string(j) + " counted " + std::to_string(digit) + " times");
        if (digit == 1 && out[static_cast<std::size_t>(j)])
          fail(at + ": rank " + std::to_string(j) + " is back after it was dropped");
        if (digit == 1 && last[k][static_cast<std::size_t>(j)] != t - 1)
          fail(at + ": rank " + std::to_string(j) + " is back after it was dropped from this key");
        if (digit == 1) last[k][static_cast<std::size_t>(j)] = t;
        if (digit == 0) absent[static_cast<std::size_t>(j)] = true;
      }
      if (((bits >> (2 * w.rank())) & 3) != 1) fail(at + ": this rank's push is missing");
      prev[k] = v;
    }
    for (int j = 0; j < n; ++j)
      if (absent[static_cast<std::size_t>(j)]) out[static_cast<std::size_t>(j)] = true;
    std::printf("ROUND %d rank %d\n", t, w.rank());
    std::fflush(stdout);
    if (a.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.pace_ms));
  }
  // The closed form of the rounds each rank was in, against the final weights.
  for (auto& [k, v] : weights)
    for (std::size_t i = 0; i < v.size(); ++i) {
      double drop = 0;
      for (int j = 0; j < n; ++j)
        for (int t = 0; t <= last[k][static_cast<std::size_t>(j)]; ++t)
          drop += (1 << (2 * j)) * factor(i, t);
      if (v[i] != static_cast<float>(init_value(i) - drop))
        fail("key " + std::to_string(k) + " final element " + std::to_string(i) + " is " +
             std::to_string(v[i]) + ", expected " + std::to_string(init_value(i) - drop));
    }
  for (int j = 0; j < n; ++j) {
    int lo = a.rounds, hi = -1;
    for (auto& [k, l] : last) {
      lo = std::min(lo, l[static_cast<std::size_t>(j)]);
      hi = std::max(hi, l[static_cast<std::size_t>(j)]);
    }
    if (hi - lo > 1) fail("rank " + std::to_string(j) + " left the keys more than a round apart");
    std::printf("CHAOS rank %d: worker %d last round %d %d\n", w.rank(), j, lo, hi);
  }
  std::fflush(stdout);
}

// async / ssp: every push applied alone (scale 1), lr 1: final = init - rounds * sum_r (r+1).
void each_push(psrt::Worker& w, const Args& a) {
  const std::size_t size = a.sizes.back();
  std::vector<float> v(size), g(size, static_cast<float>(w.rank() + 1)), out(size);
  for (std::size_t i = 0; i < size; ++i)
    v[i] = init_value(i);
  w.init(0, v);
  w.barrier();
  pid_t stopped = -1;
  for (int t = 0; t < a.rounds; ++t) {
    // Uneven speeds, so that ssp's bound has something to hold back.
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * w.rank()));
    psrt::Handle h = w.push_pull(0, g, out);
    if (a.kill_server >= 0 && a.kill_after == t + 1 && w.rank() == 0)
      stopped = kill_server(a.kill_server, t, a.kill_signal);
    h.wait();
  }
  if (stopped > 0 && a.kill_signal == SIGSTOP) ::kill(stopped, SIGCONT);
  w.barrier();
  w.pull(0, out).wait();
  const int n = w.num_workers();
  const double drop = static_cast<double>(a.rounds) * n * (n + 1) / 2.0;
  for (std::size_t i = 0; i < size; ++i)
    if (out[i] != static_cast<float>(init_value(i) - drop))
      fail("final weight " + std::to_string(out[i]) + " at " + std::to_string(i) + ", expected " +
           std::to_string(init_value(i) - drop));
}

// Sync, sum, lr 1, every gradient 1: each round subtracts the number of workers in it.
// Ranks 0 and 1 run rounds until the stop file appears; rank 2 runs 5 rounds, leaves, joins
// again as a new worker for 5 more rounds, leaves, and creates the stop file.
void elastic(psrt::Worker& w, const Args& a) {
  const std::size_t size = 1000;
  std::vector<float> v(size, 0.f), g(size, 1.f), out(size);
  w.init(0, v);
  if (w.rank() == 2) {
    for (int t = 0; t < 5; ++t)
      w.push_pull(0, g, out).wait();
    w.shutdown();
    psrt::WorkerOptions o;
    o.scheduler = std::getenv("PSRT_SCHEDULER");
    o.transport = std::getenv("PSRT_TRANSPORT");
    o.secret = std::getenv("PSRT_SECRET");
    psrt::Worker again = psrt::Worker::join(o);
    std::printf("REJOINED as rank %d\n", again.rank());
    for (int t = 0; t < 5; ++t)
      again.push_pull(0, g, out).wait();
    again.shutdown();
    std::FILE* f = std::fopen(a.stop_file.c_str(), "w");
    if (f) std::fclose(f);
    return;
  }
  // Rank 0 stops at the stop file and leaves; rank 1 keeps pushing until rank 0 has left (a
  // round rank 0 started may need rank 1's gradient), so that rank 1 ends as the only worker and
  // its last pull sees every round the servers applied.
  // Both wait for the event, bounded by time: the old bound of 10'000 rounds was spent in ~3 s of
  // rounds of ranks 0 and 1 alone, so under load a rejoin slower than that found the job over
  // (rank 0 left without the stop file, rank 1 printed FINAL, the join failed: the flaky
  // Job.ElasticMembershipAppliesEveryRoundOnceWithItsLiveWorkers).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto until = [&](const std::string& file) {
    while (!std::filesystem::exists(file)) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("rank " + std::to_string(w.rank()) + ": " + file + " did not appear within 120 s");
      w.push_pull(0, g, out).wait();
    }
  };
  const std::string rank0_left = a.stop_file + ".rank0-left";
  if (w.rank() == 0) {
    until(a.stop_file);
    w.shutdown();
    std::FILE* f = std::fopen(rank0_left.c_str(), "w");
    if (f) std::fclose(f);
    return;
  }
  until(rank0_left);
  w.pull(0, out).wait();
  std::printf("FINAL %.1f\n", static_cast<double>(out[0]));
}

// Ranks 1 and 2 of the attack job: sum of their two gradients, lr 1, exact every round.
void honest(psrt::Worker& w, const Args& a) {
  const std::size_t size = 4099;
  std::vector<float> v(size), g(size), out(size);
  for (std::size_t i = 0; i < size; ++i)
    v[i] = init_value(i);
  w.init(0, v);
  w.barrier();
  for (int t = 0; t < a.rounds; ++t) {
    for (std::size_t i = 0; i < size; ++i)
      g[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 7));
    w.push_pull(0, g, out).wait();
    for (std::size_t i = 0; i < size; ++i) {
      double drop = 0;
      for (int u = 0; u <= t; ++u)
        drop += 5.0 * (u + 1) + 2.0 * static_cast<double>(i % 7);
      if (out[i] != static_cast<float>(init_value(i) - drop))
        fail("round " + std::to_string(t) + " element " + std::to_string(i) + " is " +
             std::to_string(out[i]) + ", expected " + std::to_string(init_value(i) - drop));
    }
  }
}

// The target of ps_spoofer (identity_test.cc): key 0 of 4099 elements, sum of every rank's
// (r+1)(t+1) + i%7 in round t, lr 1, checked exactly; the job must still have all its workers.
void victim(psrt::Worker& w, const Args& a) {
  const std::size_t size = 4099;
  const int n = w.num_workers();
  std::vector<float> v(size), g(size), out(size);
  for (std::size_t i = 0; i < size; ++i)
    v[i] = init_value(i);
  w.init(0, v);
  w.barrier();
  const std::string ready = a.stop_file + ".ready" + std::to_string(w.rank());
  if (std::FILE* f = std::fopen(ready.c_str(), "w")) std::fclose(f);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(a.stop_file + ".go")) {
    if (std::chrono::steady_clock::now() > deadline) fail("no go file within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int t = 0; t < a.rounds; ++t) {
    for (std::size_t i = 0; i < size; ++i)
      g[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 7));
    w.push_pull(0, g, out).wait();
    for (std::size_t i = 0; i < size; ++i) {
      double drop = 0;
      for (int u = 0; u <= t; ++u)
        drop += n * (n + 1) / 2.0 * (u + 1) + n * static_cast<double>(i % 7);
      if (out[i] != static_cast<float>(init_value(i) - drop))
        fail("round " + std::to_string(t) + " element " + std::to_string(i) + " is " +
             std::to_string(out[i]) + ", expected " + std::to_string(init_value(i) - drop));
    }
  }
  w.barrier();  // every worker is still a member: a forged UNREGISTER would fail this
}

// Compares every weight with `want` exactly.
void expect_weights(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& when) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      fail(when + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
           ", expected " + std::to_string(want[i]));
}

// psrun -n 2 --lr 1 --momentum 0.5 --dampening 0.5 --skip-nonfinite --partition-bytes 4096:
// 3000 weights in 3 equal slices [0, 1000), [1000, 2000), [2000, 3000). Rank r pushes
// (r+1)(t+1) + i%3 in round t, so round t's mean is a_t = 1.5(t+1) + i%3; in round 0 rank 0's
// element 1500 is a NaN. Slice 1 skips round 0 (weights exactly unchanged) and round 1 is its
// first momentum step (buf = a_1); slices 0 and 2 take both rounds (buf = a_0, then
// 0.5 a_0 + 0.5 a_1). Every value is a multiple of 0.25, so fp32 is exact.
void guard(psrt::Worker& w) {
  constexpr std::size_t kSize = 3000;
  std::vector<float> init(kSize), weights(kSize), grad(kSize);
  for (std::size_t i = 0; i < kSize; ++i)
    init[i] = init_value(i);
  w.init(0, init);
  const auto skipped = [](std::size_t i) { return i >= 1000 && i < 2000; };
  const auto mean = [](int t, std::size_t i) {
    return 1.5f * static_cast<float>(t + 1) + static_cast<float>(i % 3);
  };
  std::vector<float> want(kSize);
  for (int t = 0; t < 2; ++t) {
    for (std::size_t i = 0; i < kSize; ++i)
      grad[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 3));
    if (t == 0 && w.rank() == 0) grad[1500] = std::nanf("");
    w.push_pull(0, grad, weights).wait();
    for (std::size_t i = 0; i < kSize; ++i) {
      if (t == 0) {
        want[i] = skipped(i) ? init[i] : init[i] - mean(0, i);
      } else {
        want[i] = skipped(i) ? init[i] - mean(1, i)
                             : init[i] - mean(0, i) - (0.5f * mean(0, i) + 0.5f * mean(1, i));
      }
    }
    expect_weights(weights, want, "round " + std::to_string(t));
  }
}

// Two workers push (2, 4) and (4, 4): the mean (3, 4) has norm 5, clipped to 1 with
// coef = float(1 / (5 + 1e-6)). Then (1, 0.5) and (0, 0): the mean (0.5, 0.25) has norm < 1 and
// is applied as it is. lr 1, no momentum.
void clip(psrt::Worker& w, const Args& a) {
  if (a.max_norm > 0.f) w.set_optimizer({.lr = 1.f, .max_grad_norm = a.max_norm});
  const std::vector<float> init = {init_value(0), init_value(1)};
  std::vector<float> weights(2);
  w.init(0, init);
  const std::vector<float> first =
      w.rank() == 0 ? std::vector<float>{2.f, 4.f} : std::vector<float>{4.f, 4.f};
  w.push_pull(0, first, weights).wait();
  const auto coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  const std::vector<float> clipped = {init[0] - 3.f * coef, init[1] - 4.f * coef};
  expect_weights(weights, clipped, "the clipped round");
  const std::vector<float> second =
      w.rank() == 0 ? std::vector<float>{1.f, 0.5f} : std::vector<float>{0.f, 0.f};
  w.push_pull(0, second, weights).wait();
  expect_weights(weights, {clipped[0] - 0.5f, clipped[1] - 0.25f}, "the unclipped round");
}

}  // namespace

// A learning-rate schedule carried by the pushes (--lr 1): round t uses rate t, so the weights
// drop by exactly t; a rate of 0 returns to the configured one.
void schedule(psrt::Worker& w, const Args& a) {
  std::vector<float> weights(1000, 0.f), grad(1000, 1.f);
  w.init(0, weights);
  double expected = 0;
  for (int t = 1; t <= a.rounds + 1; ++t) {
    const bool back_to_configured = t == a.rounds + 1;
    w.set_learning_rate(back_to_configured ? 0.f : static_cast<float>(t));
    w.push_pull(0, grad, weights).wait();
    expected -= back_to_configured ? 1 : t;
    for (float v : weights)
      if (v != static_cast<float>(expected))
        fail("round " + std::to_string(t) + ": weight " + std::to_string(v) + ", expected " +
             std::to_string(expected));
  }
  try {
    w.set_learning_rate(std::nanf(""));
    fail("set_learning_rate(NaN) was accepted");
  } catch (const psrt::Error& e) {
    if (e.code() != psrt::ErrorCode::kInvalidArgument) fail(std::string("NaN: ") + e.what());
  }
}

// Sum, lr 1, every gradient 1, a fixed set of N workers: after round t every weight is -t * N.
// Runs until the stop file appears; the first round prints HOLDING. The workers stop at the same
// round: key 1 sums who has seen the stop file, so all of them read the same vote after a round.
// (Each stopping on its own sight of the file let one worker run a round more than the others,
// a round the servers rightly applied without the workers that had left.)
void hold(psrt::Worker& w, const Args& a) {
  const std::size_t size = 4099;
  std::vector<float> v(size, 0.f), g(size, 1.f), out(size);
  std::vector<float> vote{0.f}, seen{0.f}, votes{0.f};
  w.init(0, v);
  w.init(1, vote);
  const int n = w.num_workers();
  for (int t = 1; t <= 100'000; ++t) {
    seen[0] = std::filesystem::exists(a.stop_file) ? 1.f : 0.f;
    auto weights = w.push_pull(0, g, out);
    w.push_pull(1, seen, votes).wait();
    weights.wait();
    for (std::size_t i = 0; i < size; ++i)
      if (out[i] != static_cast<float>(-t * n))
        fail("round " + std::to_string(t) + ": weight " + std::to_string(out[i]) + " at " +
             std::to_string(i) + ", expected " + std::to_string(-t * n));
    if (t == 1) {
      std::printf("HOLDING rank %d\n", w.rank());
      std::fflush(stdout);
    }
    if (votes[0] != 0.f) break;  // someone saw the stop file this round: every worker stops here
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Three keys are placed, the fourth is over PSRT_MAX_KEYS_PER_WORKER=3 and refused by name.
void quota(psrt::Worker& w) {
  std::vector<float> v(10, 0.f);
  for (int k = 0; k < 3; ++k)
    w.init(k, v);
  try {
    w.init(3, v);
    fail("a 4th key was placed beyond PSRT_MAX_KEYS_PER_WORKER=3");
  } catch (const psrt::Error& e) {
    if (std::string(e.what()).find("PSRT_MAX_KEYS_PER_WORKER") == std::string::npos)
      fail(std::string("the 4th key failed without naming the knob: ") + e.what());
    std::printf("REFUSED %s\n", e.what());
  }
}

// Rank r's gradient of element i in round t: multiples of 1/8 below 16 in magnitude, so any sum
// of a few ranks is exact in fp32 whatever its order.
float adam_grad(int rank, int t, std::size_t i) {
  return static_cast<float>(((rank + 1) * (t + 1) * static_cast<int>(i % 13 + 1)) % 17 - 8) *
         0.125f;
}

// The servers' optimizer (psrun's flags through the environment) replayed here with the fused
// kernel over every rank's gradients: each round's pulled weights must equal it bit for bit,
// whether the slice was resumed from a checkpoint or promoted from a replica. Under another
// optimizer it only pushes (a job whose servers must refuse a checkpoint).
void adam(psrt::Worker& w, const Args& a) {
  const psrt::ps::ServerConfig cfg = psrt::runtime::server_config_from_env();
  const bool replayed = psrt::kernels::is_adam(cfg.sgd);
  const int n = w.num_workers();
  const int first_round = static_cast<int>(w.resume_round());
  struct Replay {
    std::vector<float> w, m, v;
  };
  std::map<std::size_t, Replay> replay;
  std::map<std::size_t, std::vector<float>> weights, grads;
  for (std::size_t k = 0; k < a.sizes.size(); ++k) {
    std::vector<float> v(a.sizes[k]);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = 0.1f * init_value(i);
    w.init(k, v);
    replay[k] = {v, std::vector<float>(v.size()), std::vector<float>(v.size())};
    weights[k].resize(v.size());
    grads[k].resize(v.size());
  }
  auto step = [&](int t) {
    if (!replayed) return;
    for (auto& [k, r] : replay) {
      std::vector<std::vector<float>> all(static_cast<std::size_t>(n),
                                          std::vector<float>(r.w.size()));
      std::vector<const void*> ptrs;
      for (int rank = 0; rank < n; ++rank) {
        for (std::size_t i = 0; i < r.w.size(); ++i)
          all[static_cast<std::size_t>(rank)][i] = adam_grad(rank, t, i);
        ptrs.push_back(all[static_cast<std::size_t>(rank)].data());
      }
      psrt::kernels::SliceUpdate u;
      u.weights = r.w.data();
      u.momentum = r.m.data();
      u.exp_avg_sq = r.v.data();
      u.grads = ptrs.data();
      u.num_grads = n;
      u.count = r.w.size();
      u.grad_scale = cfg.average ? 1.f / static_cast<float>(n) : 1.f;
      u.step = static_cast<std::uint64_t>(t) + 1;
      (void)psrt::kernels::fused_sgd_cpu(u, cfg.sgd);
    }
  };
  auto check = [&](int round) {
    if (!replayed) return;
    for (auto& [k, v] : weights)
      if (std::memcmp(v.data(), replay[k].w.data(), v.size() * sizeof(float)) != 0) {
        std::size_t i = 0;
        while (v[i] == replay[k].w[i])
          ++i;
        fail("adam: key " + std::to_string(k) + " element " + std::to_string(i) + " after round " +
             std::to_string(round) + " is " + std::to_string(v[i]) + ", the kernel gives " +
             std::to_string(replay[k].w[i]));
      }
  };
  for (int t = 0; t < first_round; ++t)
    step(t);
  pid_t stopped = -1;
  for (int t = first_round; t < a.rounds; ++t) {
    std::vector<psrt::Handle> hs;
    for (auto& [k, g] : grads) {
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = adam_grad(w.rank(), t, i);
      hs.push_back(w.push_pull(k, g, weights[k]));
    }
    if (a.kill_server >= 0 && a.kill_after == t + 1 && w.rank() == 0)
      stopped = kill_server(a.kill_server, t, SIGKILL);
    for (auto& h : hs)
      h.wait();
    step(t);
    check(t + 1);
    if (a.kill_server < 0 && a.kill_after == t + 1 && w.rank() == 0 && first_round == 0) {
      std::printf("KILLING after round %d\n", t + 1);
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }
  (void)stopped;  // SIGKILLed: nothing to wake
  std::printf("RESUMED %d, %d rounds bit for bit\n", first_round, a.rounds - first_round);
}

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.scenario == "stale" && std::string(std::getenv("PSRT_RANK")) == "0") {
    try {
      psrt::test::run_stale_rank(a.stop_file);
    } catch (const psrt::Error& e) {
      fail(std::string("stale: ") + e.what());
    }
    std::printf("PASS stale rank 0\n");
    return 0;
  }
  for (int i = 0; !a.start_file.empty() && !std::filesystem::exists(a.start_file); ++i) {
    if (i == 6000) fail("no start file " + a.start_file + " within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (a.scenario == "attack" && std::string(std::getenv("PSRT_RANK")) == "0") {
    try {
      psrt::test::run_attacks();
    } catch (const psrt::Error& e) {
      fail(std::string("attacker: ") + e.what());
    }
    std::printf("PASS attack rank 0\n");
    return 0;
  }
  if (a.scenario == "invariants" && std::string(std::getenv("PSRT_RANK")) == "0") {
    try {
      psrt::test::run_invariant_attack(a.attack_case);
    } catch (const psrt::Error& e) {
      fail(std::string("attacker: ") + e.what());
    }
    std::printf("PASS invariants rank 0\n");
    return 0;
  }
  try {
    psrt::Worker w = psrt::Worker::from_env();
    if (a.scenario == "exact" || a.scenario == "kill") {
      exact(w, a, 0);
    } else if (a.scenario == "resume") {
      std::printf("RESUMED %llu (PSRT_RESUME_ROUND %s, PSRT_RESTART_COUNT %s)\n",
                  static_cast<unsigned long long>(w.resume_round()),
                  std::getenv("PSRT_RESUME_ROUND") ? std::getenv("PSRT_RESUME_ROUND") : "unset",
                  std::getenv("PSRT_RESTART_COUNT") ? std::getenv("PSRT_RESTART_COUNT") : "unset");
      if (a.request_round > 0 && w.rank() == 0 && w.resume_round() == 0)
        psrt::ps::request_checkpoint(std::getenv("PSRT_CHECKPOINT_DIR"),
                                     static_cast<std::uint64_t>(a.request_round));
      exact(w, a, static_cast<int>(w.resume_round()));
    } else if (a.scenario == "chaos") {
      chaos(w, a);
    } else if (a.scenario == "lossy") {
      lossy(w, a);
    } else if (a.scenario == "async" || a.scenario == "ssp") {
      each_push(w, a);
    } else if (a.scenario == "attack" || a.scenario == "invariants") {
      honest(w, a);
    } else if (a.scenario == "schedule") {
      schedule(w, a);
    } else if (a.scenario == "elastic") {
      elastic(w, a);
    } else if (a.scenario == "adam") {
      adam(w, a);
    } else if (a.scenario == "guard") {
      guard(w);
    } else if (a.scenario == "clip") {
      clip(w, a);
    } else if (a.scenario == "victim") {
      victim(w, a);
    } else if (a.scenario == "stale") {
      std::vector<float> zeros(4, 0.f);
      w.init(0, zeros);
      if (std::FILE* f = std::fopen((a.stop_file + ".inited").c_str(), "w")) std::fclose(f);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
      while (!std::filesystem::exists(a.stop_file)) {
        if (std::chrono::steady_clock::now() > deadline) fail("rank 0 did not finish in 40 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } else if (a.scenario == "hold") {
      hold(w, a);
    } else if (a.scenario == "quota") {
      quota(w);
    } else if (a.scenario == "aggregate") {
      aggregate(w, a);
    } else if (a.scenario == "exit") {
      exact(w, a, 0);
      std::printf("PASS exit rank %d\n", w.rank());
      std::fflush(stdout);
      std::exit(0);  // no shutdown(), and w is never destroyed: the exit handler leaves
    } else {
      fail("unknown scenario " + a.scenario);
    }
    std::printf("PASS %s rank %d\n", a.scenario.c_str(), w.rank());
    w.shutdown();
  } catch (const psrt::Error& e) {
    fail(std::string("psrt::Error: ") + e.what());
  }
  return 0;
}
