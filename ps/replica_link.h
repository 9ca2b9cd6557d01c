// A server's replica link (psrun --replicas 2): what it keeps for replication besides its slices.
// As a primary, the connection to the server it replicates to (its backup) and the
// acknowledgements it waits for; as a backup, the copies of other servers' slices, by the server
// they came from.
//
// Protocol (ps/session/protocol.h, "Server replicas"): after every update of a slice, and once for
// a slice's initial value, the primary sends the slice's weights and momentum (REPLICATE) and the
// workers' counters (REPLICATE_COMMIT); the backup makes them its copy at once, whole, and acks.
// The primary answers no pull of that version before the ack, so a version a worker has seen is
// on two servers. When the scheduler reports a server lost (REPLICA_SET), the server named to
// take its slices turns its copies from the lost server into slices of its own (promotion) and
// every server connects to the backup the scheduler names, sending it every slice it holds.
//
// Threads: the transport's progress thread receives copies and REPLICA_SET; the update stage's
// threads send after updates (ps/update_stage.h); `connector_` connects to a new backup (a
// blocking handshake, never on the progress thread) and sends it every slice. Lock order: the
// server's locks -> link_mu_ (a send under it) -> the transport's locks; copies_mu_ is a leaf.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/work_queue.h"
#include "ps/server_slice.h"
#include "ps/session/endpoint.h"
#include "ps/session/replica_protocol.h"
#include "ps/session/requests.h"

namespace psrt::ps {

class ReplicaLink {
 public:
  using Slice = served::Slice;

  // What the link needs from the server it serves. Called without any lock of the server held.
  class Owner {
   public:
    virtual ~Owner() = default;
    // Every slice the server holds now (slices are never removed while it runs).
    virtual std::vector<Slice*> slices() = 0;
    // The live workers now.
    virtual std::set<std::uint32_t> members() = 0;
    // Makes `s` (a promoted copy) a slice of the server; false when it holds that slice already.
    virtual bool adopt(std::unique_ptr<Slice> s) = 0;
    // `s` changed (a replication that held it busy ended): serve pulls, start what may start.
    virtual void after_change(Slice& s) = 0;
  };

  ReplicaLink(std::shared_ptr<Endpoint> endpoint, transport::Transport& t, std::uint32_t self_rank,
              std::chrono::milliseconds connect_timeout, Owner& owner);
  ~ReplicaLink();
  ReplicaLink(const ReplicaLink&) = delete;
  ReplicaLink& operator=(const ReplicaLink&) = delete;

  // Test hook (a trace point): runs on the connector thread when the work of a REPLICA_SET
  // begins (the lost server's rank, or kAnyRank), before it connects or sends anything and
  // before the scheduler hears back. Set before serving.
  std::function<void(std::uint32_t lost)> before_replicating;

  // Stops the connector after the work queued; idempotent.
  void stop() { connector_.stop(); }
  // The credential of this server's registration: proven to the backup it replicates to.
  void set_credential(const Credential& c) { endpoint_->set_credential(c); }

  // Under s.mu: every worker's counters once `consumed` (an update's ranks) are applied.
  static std::vector<ReplicaCount> counts_locked(const Slice& s,
                                                 const std::vector<std::uint32_t>& consumed);
  // Sends version `version` of `s` (`weights`: where that version's weights are) to the backup;
  // `then` runs once it acknowledged (at once without a backup, or once the backup is lost).
  void replicate(const Slice& s, std::span<const float> weights, std::uint64_t version,
                 std::vector<ReplicaCount> counts, std::function<void()> then);
  // Replicates `s` as it is now (busy meanwhile); at once (then()) when an update holds it.
  void replicate_slice(Slice& s, std::function<void()> then);

  // The credential server `rank` proves when it connects here: its registration's, while it is
  // this server's primary. Throws psrt::Error (kAuthentication) for any other server.
  Credential primary_credential(std::uint32_t rank);
  // The Handler entry points for messages from servers (progress thread).
  MutableBuffer place(Peer& peer, const Header& h, std::size_t size);
  void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // REPLICA_SET from the scheduler (progress thread): promotes the lost server's copies when
  // this server is named to, and moves the link to the backup named.
  void on_replica_set(Peer& scheduler, const Header& h, std::span<const std::byte> payload);
  void peer_closed(Peer& peer, const Status& why);
  // This server's committed copy of another server's slice, for tests; empty when it has none.
  std::optional<served::SliceView> copy(std::uint64_t key, std::uint32_t index);

 private:
  // The copy of one slice of another server. All fields: copies_mu_.
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
  // One version of a slice on its way to the backup (send()): the copies sent, and what runs
  // once a backup that is still this server's acknowledged it. Owned by the sends and the
  // acknowledgement's callback.
  struct Replication {
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

  void send(const std::shared_ptr<Replication>& r);
  // REPLICATE_COMMIT: makes the staged parts the copy and acks.
  void commit(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // Throws psrt::Error unless `peer` proved the credential of this server's current primary.
  void check_primary(const Peer& peer, const Header& h);
  // Makes the copies from server `lost` slices of this server; returns how many.
  std::size_t promote(std::uint32_t lost);
  // On the connector thread: connects to the new backup at `addr` unless it is the `same` one,
  // then sends it every slice; `ack` hears the outcome once the backup acknowledged every copy.
  void copy_to_backup(const std::string& addr, std::uint32_t backup_rank, bool same,
                      std::uint32_t lost, const std::function<void(const Status&)>& ack);
  // Connects to the new backup server `rank` at `address` (connector thread).
  std::shared_ptr<Peer> connect_backup(const std::string& address, std::uint32_t rank);

  // Set by the constructor, constant after.
  std::shared_ptr<Endpoint> endpoint_;
  transport::Transport& transport_;
  const std::uint32_t self_rank_;
  const std::chrono::milliseconds connect_timeout_;
  Owner& owner_;

  // Primary side. link_mu_ guards backup_ and backup_rank_, and the backup side's primary_ and
  // primary_credential_.
  std::mutex link_mu_;
  std::shared_ptr<Peer> backup_;  // null: this server replicates to nobody now
  std::uint32_t backup_rank_ = kAnyRank;
  // Backup side: the one server that may replicate here now (the last REPLICA_SET's; kAnyRank:
  // none) and the credential the scheduler gave its registration. Only a connection that proved
  // both in its handshake may send REPLICATE and REPLICATE_COMMIT, and only while that server is
  // still the primary.
  std::uint32_t primary_ = kAnyRank;
  Credential primary_credential_{};
  Requests acks_;  // REPLICATE_COMMIT → REPLICATE_ACK; thread-safe

  std::mutex copies_mu_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, Copy> copies_;  // copies_mu_

  // Runs REPLICA_SET's work in order: connecting to a new backup, sending it every slice. Last:
  // its thread uses the above.
  WorkQueue<std::function<void()>> connector_{1, [](std::function<void()>& job) { job(); }};
};

}  // namespace psrt::ps
