#include "runtime/server_process.h"

#include <fmt/core.h>

#include <algorithm>
#include <csignal>
#include <ctime>
#include <future>
#include <optional>

#include "base/log.h"
#include "device/cuda_device.h"
#include "kernels/fused_adam.h"
#include "ps/metrics.h"
#include "ps/session/auth.h"
#include "ps/session/requests.h"
#include "ps/timeline.h"
#include "runtime/engine_env.h"
#include "runtime/env_contract.h"
#include "runtime/job_secret.h"
#include "runtime/listen_address.h"
#include "transport/factory.h"
#include "transport/socket.h"

namespace psrt::runtime {

ps::ServerConfig server_config_from_env() {
  ps::ServerConfig c;
  c.mode = ps::parse_mode(env_string("PSRT_MODE"));
  c.staleness = static_cast<std::uint64_t>(env_int("PSRT_STALENESS", 0, 1 << 20));
  c.sgd = {.lr = env_float("PSRT_LR"),
           .momentum = env_float("PSRT_MOMENTUM"),
           .dampening = env_float("PSRT_DAMPENING"),
           .weight_decay = env_float("PSRT_WEIGHT_DECAY"),
           .nesterov = env_bool("PSRT_NESTEROV"),
           .max_grad_norm = env_float("PSRT_MAX_GRAD_NORM"),
           .skip_nonfinite = env_bool("PSRT_SKIP_NONFINITE")};
  if (!kernels::parse_algorithm(env_string("PSRT_OPTIMIZER"), c.sgd.algorithm))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("PSRT_OPTIMIZER='{}' is not sgd, adam or adamw", env_string("PSRT_OPTIMIZER")));
  if (!kernels::parse_betas(env_string("PSRT_BETAS"), c.sgd))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("PSRT_BETAS='{}' is not B1,B2 (e.g. 0.9,0.999)", env_string("PSRT_BETAS")));
  c.sgd.eps = env_float("PSRT_EPS");
  OptimizerConfig checked;
  if (Status s = ps::decode_optimizer(ps::encode_optimizer(c.sgd), checked); !s.ok())
    throw Error(ErrorCode::kInvalidArgument,
                "PSRT_OPTIMIZER/PSRT_LR/PSRT_MOMENTUM/.../PSRT_EPS: " + s.message());
  auto agg = env_string("PSRT_AGGREGATE");
  if (agg != "mean" && agg != "sum")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PSRT_AGGREGATE='{}' is not mean or sum", agg));
  c.average = agg == "mean";
  c.checkpoint_dir = env_string("PSRT_CHECKPOINT_DIR");
  c.checkpoint_every = static_cast<std::uint64_t>(env_int("PSRT_CHECKPOINT_EVERY", 0, 1LL << 40));
  c.threads = static_cast<int>(env_int("PSRT_SERVER_THREADS", 1, 256));
  c.trace_path = env_string("PSRT_SERVER_TRACE");
  c.max_keys_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_KEYS_PER_WORKER", 1, 1LL << 40));
  c.max_slices_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_SLICES_PER_WORKER", 1, 1LL << 40));
  c.backup_workers = static_cast<std::uint32_t>(env_int("PSRT_BACKUP_WORKERS", 0, 4095));
  // The worker count is psrun's to check (workers may join later): only the mode and replicas.
  ps::check_backup_workers(c.mode, c.backup_workers, c.backup_workers + 1,
                           static_cast<std::uint32_t>(env_int("PSRT_REPLICAS", 1, 2)));
  try {
    c.device = device::parse_device(env_string("PSRT_SERVER_DEVICE"));
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("PSRT_SERVER_DEVICE: ") + e.what());
  }
  c.partition_bytes = static_cast<std::size_t>(env_int("PSRT_PARTITION_BYTES", 4, 1LL << 31));
  c.balanced_cut = balanced_cut_from_env();
  c.transport = env_string("PSRT_TRANSPORT");
  c.num_servers = static_cast<std::uint32_t>(env_int("PSRT_NUM_SERVERS", 1, 1 << 20));
  return c;
}

ps::Admission admission_from_env(std::size_t job_processes, const JobEnv& job) {
  ps::Admission a;
  a.handshake_timeout = env_ms("PSRT_HANDSHAKE_TIMEOUT_MS", job);
  const std::size_t floor = job_processes + 16;
  a.max_pending = std::max<std::size_t>(
      floor, static_cast<std::size_t>(env_int("PSRT_MAX_UNAUTHENTICATED", 1, 1 << 24, job)));
  a.max_pending_per_host = std::max<std::size_t>(
      floor,
      static_cast<std::size_t>(env_int("PSRT_MAX_UNAUTHENTICATED_PER_HOST", 1, 1 << 24, job)));
  return a;
}

namespace {

// Signals are taken synchronously by the main loop (sigtimedwait); blocked before any thread
// starts so that every thread inherits the mask.
sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

// A process an engine started must be a server rank to run as one.
void check_engine_rank_is_a_server() {
  if (auto job = adopt_engine_env(); job && job->role != "server")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: global rank {} is worker {} in this job, not a server: start "
                            "every rank as `psrun --role-from-env -- PROGRAM`",
                            job->engine, job->global_rank, job->rank));
}

transport::Options server_transport_options(std::size_t partition, const ps::Admission& admission,
                                            const std::string& secret) {
  transport::Options topts;
  topts.max_payload_bytes = partition + ps::kMaxControlBytes;
  topts.connect_timeout = env_ms("PSRT_CONNECT_TIMEOUT_MS");
  topts.accept_timeout = admission.handshake_timeout;
  topts.spin = std::chrono::microseconds(env_int("PSRT_SPIN_US", 0, 1'000'000));
  if (env_bool("PSRT_SECURE")) topts.secure_secret = secret;
  topts.bootstrap_secret = secret;
  return topts;
}

// REGISTER with the scheduler, announcing `address`; nullopt when the job had already ended
// (the workers were done before this server arrived, e.g. a COMMAND that never joined).
std::optional<ps::Reply> register_server(ps::Requests& requests, ps::Peer& scheduler,
                                         std::uint32_t rank, std::string address,
                                         std::chrono::milliseconds timeout) {
  ps::Header reg;
  reg.type = ps::MsgType::kRegister;
  reg.set_role(ps::Role::kServer);
  reg.set_rank(rank);
  try {
    return requests.call(scheduler, reg, ps::encode_lines({&address, 1}), "REGISTER", timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCancelled) throw;
    return std::nullopt;
  }
}

// Heartbeats to the scheduler until the job ends (SHUTDOWN) or a stop signal comes.
Status serve_until_stopped(std::future<Status>& ended, const sigset_t& stop_signals,
                           std::chrono::milliseconds heartbeat, ps::Peer& scheduler,
                           const transport::Transport& transport) {
  for (;;) {
    if (ended.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready)
      return ended.get();
    timespec ts{static_cast<time_t>(heartbeat.count() / 1000),
                static_cast<long>(heartbeat.count() % 1000) * 1'000'000};
    if (int sig = sigtimedwait(&stop_signals, nullptr, &ts); sig > 0)
      return Status(ErrorCode::kCancelled, fmt::format("stopped by signal {}", sig));
    ps::Header hb;
    hb.type = ps::MsgType::kHeartbeat;
    scheduler.send(hb);
    ps::report_metrics(scheduler, ps::Role::kServer, transport);
  }
}

[[noreturn]] void throw_resume_without_checkpoints(std::uint64_t round) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("the scheduler resumes from checkpoint round {}, but this server has "
                          "no PSRT_CHECKPOINT_DIR: give every server the job's checkpoint "
                          "directory",
                          round));
}

}  // namespace

int run_server_from_env() {
  const sigset_t stop_signals = block_stop_signals();
  check_engine_rank_is_a_server();
  const auto rank = static_cast<std::uint32_t>(env_int("PSRT_RANK", 0, 1 << 20));
  log::set_prefix(fmt::format("server {}", rank));
  auto config = server_config_from_env();
  ps::enable_metrics(env_bool("PSRT_METRICS") || !env_string("PSRT_METRICS_PORT").empty());
  ps::enable_timeline(env_bool("PSRT_TIMELINE"));
  const auto scheduler_addr = env_string("PSRT_SCHEDULER");
  if (scheduler_addr.empty())
    throw Error(ErrorCode::kInvalidArgument, "PSRT_SCHEDULER is not set: servers run under psrun");
  const auto secret = job_secret(NoSecret::kRefuse);
  const std::size_t partition = config.partition_bytes;
  const auto heartbeat = env_ms("PSRT_HEARTBEAT_MS");
  ps::Server server(config);
  ps::Requests requests;
  std::shared_ptr<ps::Peer> scheduler;
  std::promise<Status> ended;
  std::atomic<bool> ended_set{false};
  server.on_control = [&](const ps::Header& h, std::span<const std::byte> payload) {
    if (h.type == ps::MsgType::kShutdown) {
      std::string why(reinterpret_cast<const char*>(payload.data()), payload.size());
      const auto code = h.shutdown_code();
      if (!ended_set.exchange(true))
        ended.set_value(code == ErrorCode::kOk ? Status() : Status(code, why));
      return;
    }
    if (h.type == ps::MsgType::kRegisterReply) server.set_resume_round(h.round);
    if (scheduler) requests.complete(*scheduler, h, payload);
  };

  ps::Limits limits;
  limits.max_data_bytes = partition;
  // Workers connect to every server: a job's processes all connecting at once stay admitted.
  const auto job_processes = static_cast<std::size_t>(env_int("PSRT_NUM_WORKERS", 1, 1 << 24) +
                                                      env_int("PSRT_NUM_SERVERS", 1, 1 << 24));
  const ps::Admission admission = admission_from_env(job_processes);
  auto endpoint = std::make_shared<ps::Endpoint>(secret, ps::Role::kServer, limits, admission);
  endpoint->set_handler(&server);
  endpoint->set_self_rank(rank);  // proven to every worker in WELCOME
  const transport::Options topts = server_transport_options(partition, admission, secret);
  auto transport = transport::create_transport(env_string("PSRT_TRANSPORT"), endpoint, topts);
  server.set_transport(*transport);
  if (env_int("PSRT_REPLICAS", 1, 2) > 1)
    server.enable_replicas(endpoint, *transport, rank, topts.connect_timeout);
  const auto address =
      transport->listen(transport::join_address(listen_host_from_env(scheduler_addr), 0));
  scheduler = endpoint->connect(*transport, scheduler_addr, rank, ps::Role::kScheduler, 0,
                                topts.connect_timeout);
  const auto reply = register_server(requests, *scheduler, rank, address, topts.connect_timeout);
  if (!reply) {
    PSRT_LOG_INFO("the job ended before this server registered");
    transport->shutdown();
    return 0;
  }
  const std::uint64_t round = reply->header.round;
  ps::sync_clock(requests, *scheduler, topts.connect_timeout);  // when the timeline is on
  if (round > 0 && config.checkpoint_dir.empty()) {
    transport->shutdown();
    throw_resume_without_checkpoints(round);
  }
  PSRT_LOG_INFO("listening on {} ({}, mode {}{})", address, transport->name(),
                ps::to_string(config.mode), round ? fmt::format(", resuming round {}", round) : "");
  auto result = ended.get_future();
  const Status status =
      serve_until_stopped(result, stop_signals, heartbeat, *scheduler, *transport);
  // The final counts, while the scheduler's connection is still open.
  ps::report_metrics(*scheduler, ps::Role::kServer, *transport, std::chrono::seconds(2));
  ps::flush_timeline(*scheduler, std::chrono::seconds(5));
  server.stop();
  transport->shutdown();
  if (!status.ok()) {
    PSRT_LOG_ERROR("{}", status.message());
    return 1;
  }
  return 0;
}

}  // namespace psrt::runtime
