// A ps::Server with replicas (psrun --replicas 2) in the test's own process, registered with a
// ps::Scheduler over TCP on 127.0.0.1 as runtime/server_process.cc wires one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ps/scheduler.h"
#include "ps/server.h"
#include "ps/session/endpoint.h"
#include "ps/session/protocol.h"
#include "ps/session/requests.h"
#include "transport/factory.h"

namespace psrt::ps {

struct ReplicaServer {
  ReplicaServer(ServerConfig config, std::uint32_t rank, std::string secret)
      : server(std::move(config)), rank(rank), secret(std::move(secret)) {}
  ~ReplicaServer() {
    if (transport) transport->shutdown();
    server.stop();
  }

  void start(const std::string& scheduler_address) {
    server.on_control = [this](const Header& h, std::span<const std::byte> payload) {
      if (h.type == MsgType::kShutdown && on_shutdown) on_shutdown(h);
      std::lock_guard lock(mu);
      if (scheduler && h.type != MsgType::kShutdown) requests.complete(*scheduler, h, payload);
    };
    endpoint = std::make_shared<Endpoint>(secret, Role::kServer, Limits{});
    endpoint->set_handler(&server);
    endpoint->set_self_rank(rank);
    transport = transport::create_transport("tcp", endpoint);
    server.set_transport(*transport);
    server.enable_replicas(endpoint, *transport, rank, std::chrono::seconds(10));
    address = transport->listen("127.0.0.1:0");
    auto peer = endpoint->connect(*transport, scheduler_address, rank, Role::kScheduler, 0,
                                  std::chrono::seconds(10));
    {
      std::lock_guard lock(mu);
      scheduler = peer;
    }
    Header reg;
    reg.type = MsgType::kRegister;
    reg.set_role(Role::kServer);
    reg.set_rank(rank);
    requests.call(*peer, reg, encode_lines({&address, 1}), "REGISTER", std::chrono::seconds(10));
  }

  Server server;
  // Runs with each SHUTDOWN this server takes (the scheduler's, or its own on losing the
  // scheduler). Set before start().
  std::function<void(const Header&)> on_shutdown;
  const std::uint32_t rank;
  const std::string secret;
  Requests requests;
  std::mutex mu;
  std::shared_ptr<Peer> scheduler;  // guarded by mu
  std::shared_ptr<Endpoint> endpoint;
  std::unique_ptr<transport::Transport> transport;
  std::string address;
};

// A replicated job's scheduler (psrun --replicas 2): `servers` servers, `workers` workers, slices
// of `slice_values` floats.
inline SchedulerConfig replica_job_config(const std::string& secret, std::uint32_t servers,
                                          std::uint32_t workers, std::size_t slice_values) {
  SchedulerConfig sc;
  sc.secret = secret;
  sc.num_servers = servers;
  sc.num_workers = workers;
  sc.replicas = 2;
  sc.partition_bytes = slice_values * sizeof(float);
  return sc;
}

// That job's servers, `base` with the job's slice size and server count, not started yet (a test
// may set hooks before ReplicaServer::start).
inline std::vector<std::unique_ptr<ReplicaServer>> replica_servers(const SchedulerConfig& sc,
                                                                   ServerConfig base = {}) {
  std::vector<std::unique_ptr<ReplicaServer>> servers;
  base.partition_bytes = sc.partition_bytes;
  base.num_servers = sc.num_servers;
  for (std::uint32_t r = 0; r < sc.num_servers; ++r)
    servers.push_back(std::make_unique<ReplicaServer>(base, r, sc.secret));
  return servers;
}

}  // namespace psrt::ps
