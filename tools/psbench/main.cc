// psbench: psrt's benchmarks. Each prints one JSON object per measurement on stdout.
#include <CLI/CLI.hpp>
#include <iostream>

#include "device/cuda_device.h"
#include "kernel_bench.h"
#include "psrt/error.h"
#include "psrt/version.h"
#include "pushpull_bench.h"
#include "suite_bench.h"
#include "transport/factory.h"
#include "transport_bench.h"

namespace {

// The hidden passive side of `psbench transport` (psbench starts it).
struct PeerConfig {
  std::string transport = "tcp";
  std::string listen = "127.0.0.1:0";
  std::size_t max_size = std::size_t{1} << 30;
  bool secure = false;
};

CLI::App* add_transport_command(CLI::App& app, psrt::bench::TransportBenchConfig& tc) {
  std::string backends;
  for (const auto& b : psrt::transport::available_backends())
    backends += " " + b;
  auto* tr = app.add_subcommand("transport", "bandwidth or latency between two processes");
  tr->add_option("--transport", tc.transport, "backend:" + backends)->capture_default_str();
  tr->add_option("--mode", tc.mode, "bw (window of outstanding sends) or lat (ping-pong)")
      ->check(CLI::IsMember({"bw", "lat"}))
      ->capture_default_str();
  tr->add_option("--size", tc.sizes, "payload sizes in bytes, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 30));
  tr->add_option("--iters", tc.iters, "measured messages per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tr->add_option("--warmup", tc.warmup, "unmeasured messages first (default iters/10, >= 10)");
  tr->add_option("--window", tc.window, "bw: sends outstanding at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tr->add_option("--listen", tc.listen, "be the passive side on HOST:PORT (for two hosts)");
  tr->add_option("--connect", tc.connect, "measure against a passive side at HOST:PORT");
  tr->add_flag("--secure", tc.secure,
               "the secure mode on both sides (secret: PSRT_SECRET, else a fresh one)");
  return tr;
}

CLI::App* add_pushpull_command(CLI::App& app, psrt::bench::PushPullConfig& pc) {
  auto* pp = app.add_subcommand(
      "pushpull", "push_pull rounds through the parameter server; run it as psrun's COMMAND");
  pp->add_option("--size", pc.sizes, "tensor sizes in bytes, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 31));
  pp->add_option("--keys", pc.keys,
                 "tensors of --size per round, all in flight before the first wait (1: latency)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  pp->add_option("--iters", pc.iters, "measured rounds per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  pp->add_option("--warmup", pc.warmup, "unmeasured rounds first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  pp->add_option("--compute-ms", pc.compute_ms,
                 "a step's compute before each round (a sleep, no core taken)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  pp->add_option("--slow-rank", pc.slow_rank,
                 "this worker computes --slow-factor times as long (a straggler; -1: none)")
      ->capture_default_str();
  pp->add_option("--slow-factor", pc.slow_factor, "the straggler's compute, in --compute-ms")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  return pp;
}

CLI::App* add_kernel_command(CLI::App& app, psrt::bench::KernelBenchConfig& kc) {
  auto* kb = app.add_subcommand(
      "kernel",
      "the server's fused aggregate+optimizer update vs a large copy timed in the same run");
  kb->add_option("--device", kc.device, "cpu | cuda | cuda:N (cuda is cuda:0)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              psrt::device::parse_device(s);
              return {};
            } catch (const psrt::Error& e) {
              return e.what();
            }
          },
          "DEVICE"))
      ->capture_default_str();
  kb->add_option("--workers", kc.workers, "gradients aggregated per update (N)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  kb->add_option("--params", kc.params, "elements per update, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 31));
  kb->add_option("--dtype", kc.dtype, "gradient type: fp32 | fp16 | bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  kb->add_option("--iters", kc.iters, "timed updates; the median is reported")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  kb->add_option("--warmup", kc.warmup, "untimed updates first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  kb->add_option("--optimizer", kc.optimizer,
                 "cpu: the update timed: sgd (momentum 0.9) | adam | adamw (two moments)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  kb->add_option("--threads", kc.threads, "cpu: threads the update and the copy are split over")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  kb->add_option("--max-grad-norm", kc.max_grad_norm,
                 "cpu: clip the mean gradient's L2 norm to this (0 = off; times the pre-pass)")
      ->check(CLI::NonNegativeNumber);
  kb->add_flag("--skip-nonfinite", kc.skip_nonfinite,
               "cpu: skip a step whose gradient holds a NaN or infinity (times the pre-pass)");
  return kb;
}

CLI::App* add_peer_command(CLI::App& app, PeerConfig& c) {
  auto* peer = app.add_subcommand("transport-peer", "internal: the passive side psbench starts");
  peer->group("");  // hidden
  peer->add_option("--transport", c.transport);
  peer->add_option("--listen", c.listen);
  peer->add_option("--max-size", c.max_size);
  peer->add_flag("--secure", c.secure);
  return peer;
}

}  // namespace

// CLI11's and the allocator's exceptions end psbench with the runtime's message; psrt::Error is
// caught below.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  CLI::App app{"psbench: psrt benchmarks; one JSON object per measurement on stdout"};
  app.require_subcommand(1);
  app.set_version_flag("--version", PSRT_VERSION, "print psrt's version and exit");
  psrt::bench::TransportBenchConfig tc;
  auto* tr = add_transport_command(app, tc);
  psrt::bench::PushPullConfig pc;
  auto* pp = add_pushpull_command(app, pc);
  psrt::bench::KernelBenchConfig kc;
  auto* kb = add_kernel_command(app, kc);
  psrt::bench::SuiteConfig sc;
  auto* su = psrt::bench::add_suite_command(app, sc);
  auto* list = app.add_subcommand("backends", "print the transport backends of this build");
  PeerConfig peer_config;
  auto* peer = add_peer_command(app, peer_config);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*list) {
      for (const auto& b : psrt::transport::available_backends())
        std::cout << b << "\n";
      return 0;
    }
    if (*tr) return psrt::bench::run_transport_bench(tc);
    if (*pp) return psrt::bench::run_pushpull_bench(pc);
    if (*kb) return psrt::bench::run_kernel_bench(kc);
    if (*su) return psrt::bench::run_suite(sc);
    if (*peer)
      return psrt::bench::run_transport_peer(peer_config.transport, peer_config.listen,
                                             peer_config.max_size, peer_config.secure);
  } catch (const psrt::Error& e) {
    std::cerr << "psbench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
