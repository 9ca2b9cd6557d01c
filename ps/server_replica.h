// What a server keeps for replication (psrun --replicas 2) besides its slices: as a primary, the
// connection to the server it replicates to (its backup) and the acknowledgements it waits for;
// as a backup, the copies of other servers' slices, by the server they came from.
//
// Protocol (ps/session/protocol.h, "Server replicas"): after every update of a slice, and once for
// a slice's initial value, the primary sends the slice's weights and momentum (REPLICATE) and the
// workers' counters (REPLICATE_COMMIT); the backup makes them its copy at once, whole, and acks.
// The primary answers no pull of that version before the ack, so a version a worker has seen is
// on two servers. When the scheduler reports a server lost (REPLICA_SET), the server named to
// take its slices turns its copies from the lost server into slices of its own (promotion) and
// every server connects to the backup the scheduler names, sending it every slice it holds.
//
// Threads: the transport's progress thread receives copies and REPLICA_SET; pool threads send
// after updates; `connector` connects to a new backup (a blocking handshake, never on the
// progress thread) and sends it every slice. Lock order: the server's locks -> Replica::link_mu (a
// send under it) -> the transport's locks; copies_mu is a leaf.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/work_queue.h"
#include "ps/server.h"
#include "ps/session/replica_protocol.h"
#include "ps/session/requests.h"

namespace psrt::ps {

struct Server::Replica {
  Replica(std::shared_ptr<Endpoint> ep, transport::Transport& t, std::uint32_t rank,
          std::chrono::milliseconds timeout)
      : endpoint(std::move(ep)), transport(t), self_rank(rank), connect_timeout(timeout) {}
  ~Replica() { connector.stop(); }

  // Set by the constructor, constant after.
  std::shared_ptr<Endpoint> endpoint;
  transport::Transport& transport;
  const std::uint32_t self_rank;
  const std::chrono::milliseconds connect_timeout;

  // Primary side. link_mu guards backup and backup_rank, and the backup side's primary and
  // primary_credential.
  std::mutex link_mu;
  std::shared_ptr<Peer> backup;  // null: this server replicates to nobody now
  std::uint32_t backup_rank = kAnyRank;
  // Backup side: the one server that may replicate here now (the last REPLICA_SET's; kAnyRank:
  // none) and the credential the scheduler gave its registration. Only a connection that proved
  // both in its handshake may send REPLICATE and REPLICATE_COMMIT, and only while that server is
  // still the primary.
  std::uint32_t primary = kAnyRank;
  Credential primary_credential{};
  Requests acks;  // REPLICATE_COMMIT → REPLICATE_ACK; thread-safe
  // Runs REPLICA_SET's work in order: connecting to a new backup, sending it every slice.
  WorkQueue<std::function<void()>> connector{1, [](std::function<void()>& job) { job(); }};

  // Backup side: the copy of one slice of another server. All fields: copies_mu.
  struct Copy {
    std::uint32_t source = kAnyRank;  // the server it came from
    std::uint64_t key = 0, offset = 0, count = 0, total = 0;
    std::uint32_t index = 0;
    std::uint64_t version = 0;
    std::vector<float> weights, momentum;
    std::vector<ReplicaCount> counts;
    bool committed = false;  // false until the first REPLICATE_COMMIT
    // The parts of the version being received, made the copy by its commit: weights, then the
    // optimizer state (ps/optimizer_state.h) in one part (SGD's momentum) or two (Adam's
    // exp_avg and exp_avg_sq, with the step count in part 2's header).
    std::vector<float> staged[3];
    std::uint64_t staged_version[3] = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
    std::uint64_t staged_steps = 0;
  };
  std::mutex copies_mu;
  std::map<std::pair<std::uint64_t, std::uint32_t>, Copy> copies;
};

// One version of a slice on its way to the backup (Server::send_replica): the copies sent, and
// what runs once a backup that is still this server's acknowledged it. Owned by the sends and
// the acknowledgement's callback.
struct Server::Replication {
  std::uint64_t key = 0, offset = 0, count = 0, total = 0, version = 0;
  std::uint32_t index = 0;
  // Weights, then the optimizer state when it has any: momentum (count values), or Adam's
  // exp_avg and exp_avg_sq (count values each) with `adam_steps`.
  std::vector<std::vector<float>> parts;
  std::uint64_t adam_steps = 0;
  std::vector<std::byte> counts;  // encoded ReplicaCounts
  std::shared_ptr<Peer> sent_to;  // the backup it went to last
  std::function<void()> then;
};

}  // namespace psrt::ps
