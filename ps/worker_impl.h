// The worker client behind include/psrt/psrt.h: one transport, an authenticated connection to
// the scheduler and to every server, the key layouts the scheduler handed out, and the
// outstanding requests. Replies land in the caller's buffers (pull) through Requests::dest.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "device/ipc.h"
#include "ps/device_staging.h"
#include "ps/metric_hooks.h"
#include "ps/send_window.h"
#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "psrt/psrt.h"
#include "transport/transport.h"

namespace psrt {

namespace detail {
// Completion of one operation made of `parts` requests; the first error wins.
struct HandleState {
  HandleState(int parts, std::chrono::milliseconds timeout, std::string what)
      : remaining(parts), unsent(parts), timeout(timeout), what(std::move(what)) {}
  void complete_part(const Status& s);
  void sent_part();  // one request's payload left the caller's buffer (or failed to)
  // A slice's weights (or its version: VERSION_REPLY) arrived with this reply: keeps the lowest
  // slice version (Handle::version).
  void note_version(const ps::Header& reply);

  std::mutex mu;
  std::condition_variable cv;
  int remaining;
  int unsent;
  Status status;
  std::uint64_t version = 0;
  bool has_version = false;
  // Backup workers (from the pull replies: Header::late_dropped, round_workers): this worker's
  // pushes the servers dropped as late, summed over the slices, and the fewest gradients an
  // update of the version received averaged.
  std::uint64_t dropped = 0;
  std::uint32_t round_workers = 0;
  const std::chrono::milliseconds timeout;
  const std::string what;
  ps::OpMetrics metrics;  // live metrics (ps/metric_hooks.h); set before the first send
};
}  // namespace detail

class Worker::Impl final : public ps::Handler {
 public:
  explicit Impl(WorkerOptions options);
  ~Impl() override;

  int rank() const { return static_cast<int>(rank_); }
  int num_workers() const { return num_workers_; }
  bool joined() const { return joined_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  std::uint64_t resume_round() const { return resume_round_; }

  void set_optimizer(const OptimizerConfig& c);
  void set_learning_rate(float lr);
  void init(Key key, std::span<const float> value, KeyUpdate update);
  // One request per slice of `key`: INIT/PUSH/PUSH_PULL send `grad`'s slice, PULL/PUSH_PULL
  // replies land in `out`'s slice (fp32). Either may be device memory (ps/worker_device.cc).
  // `update`: an INIT's KeyUpdate.
  Handle data_op(ps::MsgType type, Key key, ConstBuffer grad, ps::WireType dtype, MutableBuffer out,
                 KeyUpdate update = KeyUpdate::kOptimizer);
  // One VERSION per slice of `key`; the Handle's version() is the key's (ps/worker.cc).
  Handle version(Key key);
  void barrier();
  void shutdown();
  // A key's optimizer state on the servers, and job checkpoints on demand (ps/worker_state.cc).
  OptimizerState optimizer_state(Key key);
  void set_optimizer_state(Key key, const OptimizerState& state);
  void request_checkpoint(std::uint64_t round);

  MutableBuffer place(ps::Peer& peer, const ps::Header& h, std::size_t size,
                      std::uint64_t cookie) override;
  void on_message(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload,
                  const transport::Placement& placement) override;
  void on_peer_closed(ps::Peer& peer, const Status& why) override;

 private:
  struct Layout {
    std::uint64_t total = 0;
    std::vector<ps::SliceRecord> slices;
    // The order in which this worker first used the key (0 first): its slices' priority in the
    // send windows. DistributedOptimizer touches its keys in named_parameters() order at start,
    // which is the forward order of a model whose modules are declared as they are called.
    std::uint64_t order = 0;
  };
  std::shared_ptr<const Layout> layout(Key key, std::uint64_t total);
  void check_open() const;
  // check_open(), and refuses the optimizer state's calls where they cannot work (replicas).
  void check_state_op(Key key, const char* op) const;
  // Fails every request still pending once the scheduler stopped the job (SHUTDOWN seen): for a
  // request added after SHUTDOWN's own fail_all ran.
  void fail_if_ended();
  // data_op in three steps (ps/worker.cc): check the buffers against the key, plan every slice
  // (paths, staging, IPC handles: whatever else can fail), then send every slice. An error in
  // the first two sends nothing, so no round gets a part of the operation.
  struct DataOp;     // the checked operation and its buffers
  struct SlicePlan;  // how one slice's CUDA memory travels
  DataOp check_data_op(ps::MsgType type, Key key, ConstBuffer grad, ps::WireType dtype,
                       MutableBuffer out);
  std::vector<SlicePlan> plan_data_op(const DataOp& op);
  void send_slice(const DataOp& op, const ps::SliceRecord& s, SlicePlan& plan, float lr,
                  const std::shared_ptr<detail::HandleState>& st);
  // Sends a slice's header with its gradient to its server: from the caller's buffer, or
  // through pinned memory (path c).
  using GradSend = std::function<void(const ps::Header&, transport::SendDone)>;
  GradSend grad_sender(std::uint32_t server, ConstBuffer src, SlicePlan& plan);
  // The send windows (PSRT_SEND_WINDOW, ps/send_window.h; ps/worker_window.cc): a PUSH or
  // PUSH_PULL slice waits in its server's window and goes out as a PUSH, whose PUSH_ACK (the
  // server holds the gradient) frees its bytes; a PUSH_PULL's PULL follows the PUSH_ACK and its
  // reply completes the slice, as the PUSH_PULL's would. A PULL waits its turn (0 bytes).
  struct WindowedSend {
    ps::Header header;  // the PUSH or PUSH_PULL as send_slice made it
    std::uint32_t server = 0;
    std::uint64_t priority = 0;
    std::size_t bytes = 0;  // the gradient's
    std::string what;
    MutableBuffer dest;       // where the pull reply lands
    ps::Requests::Done done;  // completes the slice (PUSH_ACK of a PUSH, reply of the PULL)
    GradSend send_grad;
    transport::SendDone sent;  // the gradient left the caller's buffer (or failed to)
  };
  bool windowed(const ps::Header& h) const;
  void send_windowed(WindowedSend w);
  void start_windowed(const WindowedSend& w);
  // The slice's PULL (after its PUSH_ACK, or a PULL waiting its turn: `report_sent` then).
  void send_pull(const WindowedSend& w, bool report_sent);
  // Device memory (ps/worker_device.cc). How CUDA memory travels to one server (path a, b or
  // c of docs/ARCHITECTURE.md, "The three GPU paths"), decided at the first use and logged once.
  enum class DevicePath : std::uint8_t { kUnknown, kDirect, kIpc, kStaged };
  // `device`: the CUDA device of the buffer at hand (for the IPC probe).
  DevicePath device_path(std::uint32_t server, int device);
  // The CUDA device of a buffer marked kCuda; throws naming the cause when it is not one.
  int cuda_device_of(const ConstBuffer& b);
  ps::DeviceStaging& staging(int device);
  device::IpcExporter& exporter(int device);
  // Sends one slice of a PUSH/PUSH_PULL/PULL whose CUDA buffers the server shares by IPC
  // (`records`: the gradient's, then the output's).
  void send_ipc(ps::Peer& server, ps::Header h, std::vector<device::IpcRecord> records,
                const std::shared_ptr<detail::HandleState>& st, const std::string& what);
  void stop_staging();
  // Server replicas (ps/worker_replica.cc): with --replicas 2 every slice operation goes to the
  // server that owns the slice now and is kept until the job no longer needs it (a push until a
  // pull of the slice answered after it), so that ROUTE can re-send it to the backup that took
  // over a lost server's slices.
  // `src`: the slice's gradient or init value (empty for PULL and VERSION), `dest`: where its
  // reply lands.
  void send_replicated(const ps::SliceRecord& s, ps::Header h, ConstBuffer src, MutableBuffer dest,
                       const std::shared_ptr<detail::HandleState>& st);
  void on_replicated_reply(Key key, std::uint32_t index, std::uint64_t id, const Status& status);
  // `refusal` (ERROR with reroute(), `text` its payload) answers a replicated operation sent to
  // a server the scheduler declared lost: true keeps its request in flight, as every request to
  // a lost server is, for the ROUTE to move and re-send (at once when the ROUTE was applied
  // first). False (the refusal then fails it) for a request that is no replicated operation
  // sent to `peer`, or one refused kMaxReroutes times. On the progress thread.
  bool keep_for_route(const ps::Peer& peer, const ps::Header& refusal,
                      std::span<const std::byte> text);
  void on_route(const ps::Header& h);
  // Server `lost` was closed here: what was sent to it goes to `to`. Under route_mu_.
  void reroute_locked(std::uint32_t lost, std::uint32_t to);
  // Server `rank`'s connection closed here (replicas): a ROUTE waiting for it goes ahead.
  void server_closed(std::uint32_t rank);

  WorkerOptions options_;
  std::shared_ptr<ps::Endpoint> endpoint_;
  std::unique_ptr<transport::Transport> transport_;
  ps::Requests requests_;
  std::shared_ptr<ps::Peer> scheduler_;
  std::vector<std::shared_ptr<ps::Peer>> servers_;
  std::uint32_t rank_ = ps::kAnyRank;
  int num_workers_ = 0;
  bool joined_ = false;
  std::uint64_t resume_round_ = 0;
  std::atomic<std::uint32_t> lr_bits_{0};  // stamped on every push: 0 = the configured rate

  std::uint32_t replicas_ = 1;  // from the REGISTER reply; constant after the constructor
  // One operation sent on a replicated slice, kept for a re-send.
  struct Sent {
    std::uint64_t id = 0;    // its request; 0 once a PUSH was acknowledged (kept until pulled)
    std::uint64_t seq = 0;   // PUSH, PUSH_PULL: its push number on the slice (header round)
    std::uint64_t upto = 0;  // the slice's push count when it was sent
    ps::Header header;
    std::shared_ptr<std::vector<std::byte>> payload;  // a copy of the gradient or init value
    std::uint32_t reroutes = 0;  // how often a server refused it with reroute()
    std::uint32_t to = 0;        // the server it was sent to last
  };
  // Sends `s` to server `to` again (its request, if any, is bound to `to` already). Under
  // route_mu_.
  void resend_locked(Sent& s, std::uint32_t to);
  struct SliceLog {
    std::uint32_t shard = 0;  // the server the shard map placed the slice on
    std::uint64_t pushes = 0;
    std::deque<Sent> sent;
  };
  std::mutex route_mu_;  // guards owner_ and logs_; before the Requests' lock and sends
  std::vector<std::uint32_t> owner_;  // who serves each server's slices now
  std::map<std::pair<Key, std::uint32_t>, SliceLog> logs_;
  // A ROUTE is applied only once the lost server's connection closed here, so that no reply of
  // it arrives after its operations went elsewhere: ROUTEs waiting for that, and the servers
  // whose connections closed. Guarded by route_mu_.
  std::map<std::uint32_t, std::uint32_t> waiting_routes_;
  std::set<std::uint32_t> closed_servers_;

  std::mutex layouts_mu_;
  std::map<Key, std::shared_ptr<const Layout>> layouts_;
  std::uint64_t next_layout_order_ = 0;  // guarded by layouts_mu_

  // One per server when PSRT_SEND_WINDOW > 0 (constant after the constructor), else empty.
  std::vector<std::unique_ptr<ps::SendWindow>> windows_;

  std::mutex staging_mu_;
  std::map<int, std::unique_ptr<ps::DeviceStaging>> staging_;      // by CUDA device
  std::map<int, std::unique_ptr<device::IpcExporter>> exporters_;  // by CUDA device
  std::mutex paths_mu_;
  std::vector<DevicePath> paths_;  // by server

  std::mutex state_mu_;
  std::condition_variable state_cv_;
  bool closed_ = false;
  std::string ended_;  // why the job ended under us (SHUTDOWN from the scheduler)
  std::thread heartbeat_;
};

}  // namespace psrt
