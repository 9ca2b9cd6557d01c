#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "base/exception_status.h"
#include "base/log.h"
#include "device/cuda_device.h"
#include "device/memory.h"
#include "ps/worker_exit.h"
#include "ps/worker_impl.h"
#include "transport/byte_streams.h"
#include "transport/factory.h"

namespace psrt {
namespace detail {

void HandleState::complete_part(const Status& s) {
  bool last = false;
  {
    std::lock_guard lock(mu);
    if (!s.ok() && status.ok()) status = s;
    last = --remaining == 0;
  }
  if (last) ps::finished_op(metrics, status.ok());  // status is final once remaining is 0
  cv.notify_all();
}

void HandleState::note_version(const ps::Header& reply) {
  if (reply.type != ps::MsgType::kPullReply && reply.type != ps::MsgType::kPullIpcReply &&
      reply.type != ps::MsgType::kVersionReply)
    return;
  std::lock_guard lock(mu);
  if (reply.type != ps::MsgType::kVersionReply) {
    dropped += reply.late_dropped();
    round_workers =
        has_version ? std::min(round_workers, reply.round_workers()) : reply.round_workers();
  }
  version = has_version ? std::min(version, reply.round) : reply.round;
  has_version = true;
}

void HandleState::sent_part() {
  {
    std::lock_guard lock(mu);
    --unsent;
  }
  cv.notify_all();
}

}  // namespace detail

bool Handle::sent() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->unsent <= 0;
}

bool Handle::wait_sent_for(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->unsent <= 0; });
}

void Handle::wait() const {
  if (!state_) return;
  const ps::WaitTimer waited(state_->metrics.key);
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, state_->timeout, [&] { return state_->remaining <= 0; }))
    throw Error(ErrorCode::kTimeout,
                fmt::format("{} did not complete within {} ms (PSRT_OP_TIMEOUT_MS)", state_->what,
                            state_->timeout.count()));
  state_->status.throw_if_error();
}

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->remaining <= 0; });
}

std::uint64_t Handle::version() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->remaining <= 0 && state_->status.ok() ? state_->version : 0;
}

std::uint64_t Handle::dropped() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->remaining <= 0 && state_->status.ok() ? state_->dropped : 0;
}

std::uint32_t Handle::round_workers() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->remaining <= 0 && state_->status.ok() ? state_->round_workers : 0;
}

bool Handle::ready() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->remaining <= 0;
}

using ps::Header;
using ps::MsgType;

Worker::Impl::Impl(WorkerOptions options) : options_(std::move(options)) {
  if (options_.scheduler.empty())
    throw Error(ErrorCode::kInvalidArgument, "no scheduler address: set PSRT_SCHEDULER");
  if (options_.secret.empty())
    throw Error(ErrorCode::kInvalidArgument, "no job secret: set PSRT_SECRET");
  endpoint_ = std::make_shared<ps::Endpoint>(options_.secret, ps::Role::kWorker, ps::Limits{});
  endpoint_->set_handler(this);
  transport::Options topts;
  topts.connect_timeout = options_.connect_timeout;
  topts.spin = options_.spin;
  if (options_.secure) topts.secure_secret = options_.secret;
  topts.bootstrap_secret = options_.secret;
  transport_ = transport::create_transport(options_.transport, endpoint_, topts);
  try {
    const auto wanted =
        options_.rank < 0 ? ps::kAnyRank : static_cast<std::uint32_t>(options_.rank);
    scheduler_ = endpoint_->connect(*transport_, options_.scheduler, wanted, ps::Role::kScheduler,
                                    0, options_.connect_timeout);
    Header h;
    h.type = MsgType::kRegister;
    h.set_role(ps::Role::kWorker);
    h.set_rank(wanted);
    // Registration waits for the whole job to arrive: bounded by the operation timeout.
    auto reply = requests_.call(*scheduler_, h, {}, "REGISTER", options_.op_timeout);
    rank_ = reply.header.assigned_rank();
    endpoint_->set_credential(ps::credential_of(reply.header));  // proven to every server
    num_workers_ = static_cast<int>(reply.header.live_workers());
    joined_ = reply.header.count == 1;  // joined a running job (docs/elastic.md)
    resume_round_ = reply.header.round;
    replicas_ = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, reply.header.total));
    scheduler_->set_rank(0);
    ps::sync_clock(requests_, *scheduler_, options_.op_timeout);  // when the timeline is on
    std::vector<std::string> addresses;
    if (Status s = ps::decode_lines(reply.payload, addresses); !s.ok() || addresses.empty())
      throw Error(ErrorCode::kProtocol, "the scheduler sent no usable server list");
    for (std::size_t i = 0; i < addresses.size(); ++i)
      servers_.push_back(endpoint_->connect(*transport_, addresses[i], rank_, ps::Role::kServer,
                                            static_cast<std::uint32_t>(i),
                                            options_.connect_timeout));
    for (std::uint32_t i = 0; i < servers_.size(); ++i)
      owner_.push_back(i);
    const std::size_t window = ps::send_window_for(
        options_.send_window, transport::moves_as_byte_streams(options_.transport));
    for (std::size_t i = 0; window > 0 && i < servers_.size(); ++i)
      windows_.push_back(std::make_unique<ps::SendWindow>(window));
  } catch (...) {
    transport_->shutdown();
    throw;
  }
  log::set_prefix(fmt::format("worker {}", rank_));
  heartbeat_ = std::thread([this] {
    std::unique_lock lock(state_mu_);
    while (!state_cv_.wait_for(lock, options_.heartbeat, [this] { return closed_; })) {
      Header h;
      h.type = MsgType::kHeartbeat;
      try {
        scheduler_->send(h);
      } catch (...) {  // e.g. no memory: one heartbeat is missed, the thread goes on
        PSRT_LOG_WARN("{}", current_exception_status("heartbeat not sent").message());
      }
      ps::report_metrics(*scheduler_, ps::Role::kWorker, *transport_);
    }
  });
  ps::leave_at_exit(this);  // a program that ends without shutdown() still leaves the job
}

Worker::Impl::~Impl() {
  try {
    shutdown();
  } catch (const Error& e) {
    PSRT_LOG_WARN("shutdown: {}", e.what());
  }
}

void Worker::Impl::check_open() const {
  auto* self = const_cast<Impl*>(this);
  std::lock_guard lock(self->state_mu_);
  if (closed_) throw Error(ErrorCode::kCancelled, "this psrt::Worker was shut down");
  if (!ended_.empty()) throw Error(ErrorCode::kCancelled, "the job has ended: " + ended_);
}

void Worker::Impl::fail_if_ended() {
  std::string why;
  {
    std::lock_guard lock(state_mu_);
    why = ended_;
  }
  if (!why.empty())
    requests_.fail_all(Status(ErrorCode::kCancelled, "the job was stopped: " + why));
}

std::shared_ptr<const Worker::Impl::Layout> Worker::Impl::layout(Key key, std::uint64_t total) {
  {
    std::lock_guard lock(layouts_mu_);
    auto it = layouts_.find(key);
    if (it != layouts_.end()) {
      if (total != 0 && it->second->total != total)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("key {} holds {} elements, not {}", key, it->second->total, total));
      return it->second;
    }
  }
  Header h;
  h.type = MsgType::kLocate;
  h.key = key;
  h.total = total;
  auto reply =
      requests_.call(*scheduler_, h, {}, fmt::format("LOCATE of key {}", key), options_.op_timeout);
  auto l = std::make_shared<Layout>();
  l->total = reply.header.total;
  if (Status s = ps::decode_slices(reply.payload, l->total,
                                   static_cast<std::uint32_t>(servers_.size()), l->slices);
      !s.ok())
    throw Error(s.code(),
                "the scheduler's layout of key " + std::to_string(key) + ": " + s.message());
  std::lock_guard lock(layouts_mu_);
  if (auto it = layouts_.find(key); it != layouts_.end()) return it->second;  // a racing LOCATE
  l->order = next_layout_order_++;
  return layouts_.emplace(key, std::move(l)).first->second;
}

void Worker::Impl::set_optimizer(const OptimizerConfig& c) {
  check_open();
  auto payload = ps::encode_optimizer(c);
  OptimizerConfig checked;
  if (Status s = ps::decode_optimizer(payload, checked); !s.ok()) s.throw_if_error();
  for (auto& server : servers_) {
    Header h;
    h.type = MsgType::kSetOptimizer;
    requests_.call(*server, h, payload, "SET_OPTIMIZER", options_.op_timeout);
  }
}

void Worker::Impl::set_learning_rate(float lr) {
  if (!std::isfinite(lr) || lr < 0.f)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("learning rate {} is not a finite number >= 0", lr));
  lr_bits_.store(std::bit_cast<std::uint32_t>(lr), std::memory_order_relaxed);
}

void Worker::Impl::init(Key key, std::span<const float> value, KeyUpdate update) {
  check_open();
  if (value.empty())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("init of key {} with 0 elements", key));
  if (update != KeyUpdate::kOptimizer && replicas_ > 1)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("init of key {} as an aggregate-only key (sum mode, allreduce): not "
                            "supported with --replicas 2 (a backup keeps no key's kind); run "
                            "without --replicas, or keep the optimizer on the servers",
                            key));
  layout(key, value.size());  // places the key on first sight; checks its size otherwise
  data_op(MsgType::kInit, key, {value.data(), value.size_bytes()}, ps::WireType::kF32, {}, update)
      .wait();
}

struct Worker::Impl::DataOp {
  MsgType type;
  Key key;
  std::shared_ptr<const Layout> layout;
  ConstBuffer grad;
  MutableBuffer out;
  ps::WireType dtype;
  std::size_t esize;
  std::string op;    // the message type's name, for errors
  KeyUpdate update;  // INIT: what the servers do with the key's rounds
  bool sends_grad;
  bool replies_weights;
  bool grad_cuda;
  bool out_cuda;
  int grad_device;  // -1 unless grad_cuda
  int out_device;   // -1 unless out_cuda

  // The slice's part of `grad` and `out`.
  ConstBuffer src_of(const ps::SliceRecord& s) const {
    return ConstBuffer{static_cast<const std::byte*>(grad.data) + s.offset * esize, s.count * esize,
                       grad.memory};
  }
  MutableBuffer dest_of(const ps::SliceRecord& s) const {
    if (!replies_weights) return MutableBuffer{};
    return MutableBuffer{static_cast<std::byte*>(out.data) + s.offset * sizeof(float),
                         s.count * sizeof(float), out.memory};
  }
};

struct Worker::Impl::SlicePlan {
  bool ipc = false;
  std::vector<device::IpcRecord> records;
  ps::DeviceStaging* grad_staging = nullptr;
  ps::DeviceStaging* out_staging = nullptr;
  std::shared_ptr<device::PinnedMemory> grad_pinned, out_pinned;
};

Handle Worker::Impl::data_op(MsgType type, Key key, ConstBuffer grad, ps::WireType dtype,
                             MutableBuffer out, KeyUpdate update) {
  check_open();
  DataOp op = check_data_op(type, key, grad, dtype, out);
  op.update = update;
  const auto lr = std::bit_cast<float>(lr_bits_.load(std::memory_order_relaxed));
  std::vector<SlicePlan> plans = plan_data_op(op);
  const auto& slices = op.layout->slices;
  auto st =
      std::make_shared<detail::HandleState>(static_cast<int>(slices.size()), options_.op_timeout,
                                            fmt::format("{} of key {}", op.op, key));
  st->metrics = ps::start_op(type, key, op.replies_weights ? out.size : 0);
  for (std::size_t i = 0; i < slices.size(); ++i)
    send_slice(op, slices[i], plans[i], lr, st);
  ps::issued_op(st->metrics, type, key, op.sends_grad ? grad.size : 0);
  return Handle(st);
}

Worker::Impl::DataOp Worker::Impl::check_data_op(MsgType type, Key key, ConstBuffer grad,
                                                 ps::WireType dtype, MutableBuffer out) {
  DataOp d{.type = type,
           .key = key,
           .layout = layout(key, 0),
           .grad = grad,
           .out = out,
           .dtype = dtype,
           .esize = ps::wire_size(dtype),
           .op = std::string(ps::to_string(type)),
           .update = KeyUpdate::kOptimizer,
           .sends_grad = type != MsgType::kPull,
           .replies_weights = type == MsgType::kPull || type == MsgType::kPushPull,
           .grad_cuda = false,
           .out_cuda = false,
           .grad_device = -1,
           .out_device = -1};
  const std::uint64_t total = d.layout->total;
  if (d.sends_grad && grad.size != total * d.esize)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} of key {}: the gradient has {} elements but the key holds {}", d.op,
                            key, grad.size / d.esize, total));
  if (d.replies_weights && out.size != total * sizeof(float))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} of key {}: the output has {} elements but the key holds {}", d.op,
                            key, out.size / sizeof(float), total));
  // CUDA buffers are checked whole before any slice leaves, so a bad one sends nothing.
  d.grad_cuda = d.sends_grad && grad.memory == MemoryType::kCuda;
  d.out_cuda = d.replies_weights && out.memory == MemoryType::kCuda;
  if (replicas_ > 1 && (d.grad_cuda || d.out_cuda))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{} of key {}: with --replicas 2 the buffers must be host memory", d.op, key));
  d.grad_device = d.grad_cuda ? cuda_device_of(grad) : -1;
  d.out_device = d.out_cuda ? cuda_device_of(out) : -1;
  return d;
}

std::vector<Worker::Impl::SlicePlan> Worker::Impl::plan_data_op(const DataOp& d) {
  const auto& slices = d.layout->slices;
  std::vector<SlicePlan> plans(slices.size());
  if (!d.grad_cuda && !d.out_cuda) return plans;  // host memory only: nothing to plan
  bool sync_default = false;
  try {
    for (std::size_t i = 0; i < slices.size(); ++i) {
      const auto& s = slices[i];
      SlicePlan& p = plans[i];
      const DevicePath path = device_path(s.server, d.grad_cuda ? d.grad_device : d.out_device);
      const ConstBuffer src = d.src_of(s);
      const MutableBuffer dest = d.dest_of(s);
      if (path == DevicePath::kIpc && d.grad_cuda == d.sends_grad &&
          d.out_cuda == d.replies_weights) {
        p.ipc = true;
        if (d.sends_grad) p.records.push_back(exporter(d.grad_device).describe(src.data, src.size));
        if (d.replies_weights)
          p.records.push_back(exporter(d.out_device).describe(dest.data, dest.size));
        continue;
      }
      // The transport reads and writes device memory on its own streams: wait for the default
      // stream's work once, as the other paths order themselves after it.
      if (path == DevicePath::kDirect) sync_default = true;
      // Staged: path c, and the CUDA side of an op that mixes host and CUDA buffers under path b.
      const bool stage = path == DevicePath::kStaged || path == DevicePath::kIpc;
      if (d.grad_cuda && stage) {
        p.grad_staging = &staging(d.grad_device);
        p.grad_pinned = p.grad_staging->take(src.size);
      }
      if (d.out_cuda && stage) {
        p.out_staging = &staging(d.out_device);
        p.out_pinned = p.out_staging->take(dest.size);
      }
    }
    if (sync_default) {
      if (d.grad_cuda) device::synchronize_legacy_default(d.grad_device);
      if (d.out_cuda && d.out_device != d.grad_device)
        device::synchronize_legacy_default(d.out_device);
    }
  } catch (...) {
    for (auto& p : plans) {
      if (p.grad_pinned) p.grad_staging->give(std::move(p.grad_pinned));
      if (p.out_pinned) p.out_staging->give(std::move(p.out_pinned));
    }
    throw;
  }
  return plans;
}

namespace {

// A reply that lands in pinned memory and reaches `dest` by one more copy before completion.
ps::Requests::Done reply_through_staging(const std::shared_ptr<detail::HandleState>& st,
                                         ps::DeviceStaging* staging,
                                         const std::shared_ptr<device::PinnedMemory>& pinned,
                                         MutableBuffer dest) {
  return [st, staging, pinned, dest](const Status& status, const ps::Header& reply,
                                     std::span<const std::byte>) {
    if (!status.ok()) {
      staging->give(pinned);
      return st->complete_part(status);
    }
    st->note_version(reply);
    try {
      staging->copy_then(dest.data, pinned->data(), dest.size,
                         [st, staging, pinned](const Status& copied) {
                           staging->give(pinned);
                           st->complete_part(copied);
                         });
    } catch (const Error& e) {
      staging->give(pinned);
      st->complete_part(Status(e));
    }
  };
}

// Sends `h` with `src` (device memory) once it is copied into `pinned`; the copies of later
// slices go on meanwhile.
void send_through_staging(const std::shared_ptr<ps::Peer>& peer, const ps::Header& h,
                          ConstBuffer src, ps::DeviceStaging* staging,
                          const std::shared_ptr<device::PinnedMemory>& pinned,
                          const std::function<void(const Status&)>& on_sent) {
  try {
    staging->copy_then(pinned->data(), src.data, src.size,
                       [h, peer, pinned, staging, on_sent, size = src.size](const Status& copied) {
                         if (!copied.ok()) {
                           staging->give(pinned);
                           return on_sent(copied);
                         }
                         ConstBuffer b{pinned->data(), size};
                         peer->send(h, {&b, 1}, [pinned, staging, on_sent](const Status& sent) {
                           staging->give(pinned);
                           on_sent(sent);
                         });
                       });
  } catch (const Error& e) {
    staging->give(pinned);
    on_sent(Status(e));
  }
}

}  // namespace

void Worker::Impl::send_slice(const DataOp& d, const ps::SliceRecord& s, SlicePlan& plan, float lr,
                              const std::shared_ptr<detail::HandleState>& st) {
  Header h;
  h.type = d.type;
  h.dtype = d.replies_weights && !d.sends_grad ? ps::WireType::kF32 : d.dtype;
  h.key = d.key;
  h.offset = s.offset;
  h.count = s.count;
  h.total = d.layout->total;
  h.set_slice(s.index);
  if (d.type == MsgType::kPush || d.type == MsgType::kPushPull) h.set_learning_rate(lr);
  if (d.type == MsgType::kInit) h.set_key_update(static_cast<std::uint32_t>(d.update));
  if (replicas_ > 1)
    return send_replicated(s, h, d.sends_grad ? d.src_of(s) : ConstBuffer{}, d.dest_of(s), st);
  auto& server = *servers_[s.server];
  const std::string what = fmt::format("{} of key {} slice {}", d.op, d.key, s.index);
  if (plan.ipc) return send_ipc(server, h, std::move(plan.records), st, what);
  const ConstBuffer src = d.src_of(s);
  MutableBuffer dest = d.dest_of(s);

  const std::int64_t began = ps::timeline_now();
  ps::Requests::Done done = [st, began, key = d.key, slice = s.index](const Status& status,
                                                                      const Header& reply,
                                                                      std::span<const std::byte>) {
    if (status.ok()) st->note_version(reply);
    ps::timeline_record(ps::TimelineKind::kReply, key, slice, began, reply.round);
    st->complete_part(status);
  };
  if (plan.out_pinned) {
    auto pinned = std::move(plan.out_pinned);
    done = reply_through_staging(st, plan.out_staging, pinned, dest);
    dest = {pinned->data(), dest.size, MemoryType::kHost};
  }
  transport::SendDone sent = [st, began, key = d.key, slice = s.index,
                              bytes = d.sends_grad ? src.size : 0](const Status&) {
    ps::timeline_record(ps::TimelineKind::kSend, key, slice, began, bytes);
    st->sent_part();
  };
  if (windowed(h))
    return send_windowed({.header = h,
                          .server = s.server,
                          .priority = (d.layout->order << 32) | s.index,
                          .bytes = d.sends_grad ? src.size : 0,
                          .what = what,
                          .dest = dest,
                          .done = std::move(done),
                          .send_grad = grad_sender(s.server, src, plan),
                          .sent = std::move(sent)});
  const auto id = requests_.add(server, what, std::move(done), dest);
  h.request_id = id;
  auto on_sent = [this, id, sent = std::move(sent)](const Status& status) {
    sent(status);
    if (!status.ok()) requests_.fail(id, status);
  };
  if (d.sends_grad) return grad_sender(s.server, src, plan)(h, std::move(on_sent));
  server.send(h, {}, std::move(on_sent));
}

Worker::Impl::GradSend Worker::Impl::grad_sender(std::uint32_t server, ConstBuffer src,
                                                 SlicePlan& plan) {
  if (!plan.grad_pinned)
    return [peer = servers_[server], src](const Header& h, transport::SendDone on_sent) {
      peer->send(h, {&src, 1}, std::move(on_sent));
    };
  return
      [peer = servers_[server], src, staging = plan.grad_staging,
       pinned = std::move(plan.grad_pinned)](const Header& h, const transport::SendDone& on_sent) {
        send_through_staging(peer, h, src, staging, pinned, on_sent);
      };
}

Handle Worker::Impl::version(Key key) {
  check_open();
  const auto l = layout(key, 0);  // kNotFound from the scheduler for a key never initialised
  auto st =
      std::make_shared<detail::HandleState>(static_cast<int>(l->slices.size()), options_.op_timeout,
                                            fmt::format("VERSION of key {}", key));
  for (const auto& s : l->slices) {
    Header h;
    h.type = MsgType::kVersion;
    h.dtype = ps::WireType::kF32;
    h.key = key;
    h.offset = s.offset;
    h.count = s.count;
    h.total = l->total;
    h.set_slice(s.index);
    if (replicas_ > 1) {
      send_replicated(s, h, {}, {}, st);
      continue;
    }
    auto& server = *servers_[s.server];
    const auto id =
        requests_.add(server, fmt::format("VERSION of key {} slice {}", key, s.index),
                      [st](const Status& status, const Header& reply, std::span<const std::byte>) {
                        if (status.ok()) st->note_version(reply);
                        st->complete_part(status);
                      },
                      {});
    h.request_id = id;
    server.send(h, {}, [this, id, st](const Status& status) {
      st->sent_part();
      if (!status.ok()) requests_.fail(id, status);
    });
  }
  return Handle(st);
}

void Worker::Impl::barrier() {
  check_open();
  Header h;
  h.type = MsgType::kBarrier;
  requests_.call(*scheduler_, h, {}, "BARRIER", options_.op_timeout);
}

void Worker::Impl::shutdown() {
  ps::forget_at_exit(this);
  {
    std::lock_guard lock(state_mu_);
    if (closed_) return;
  }
  // Let outstanding operations finish (bounded), then leave the job.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (requests_.size() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  bool ended;
  {
    std::lock_guard lock(state_mu_);
    ended = !ended_.empty();
  }
  if (!ended && scheduler_) {
    // The final counts and the timeline, before leaving.
    ps::report_metrics(*scheduler_, ps::Role::kWorker, *transport_, std::chrono::seconds(2));
    ps::flush_timeline(*scheduler_, std::chrono::seconds(5));
    try {
      Header h;
      h.type = MsgType::kUnregister;
      requests_.call(*scheduler_, h, {}, "UNREGISTER", std::chrono::seconds(10));
    } catch (const Error& e) {
      PSRT_LOG_WARN("could not unregister from the scheduler: {}", e.what());
    }
  }
  {
    std::lock_guard lock(state_mu_);
    closed_ = true;
  }
  state_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  transport_->shutdown();
  requests_.fail_all(Status(ErrorCode::kCancelled, "the worker shut down"));
  // Last: the callbacks of the sends and requests just ended still use the staging buffers.
  stop_staging();
}

MutableBuffer Worker::Impl::place(ps::Peer& peer, const Header& h, std::size_t size,
                                  std::uint64_t) {
  if (h.type != MsgType::kPullReply && h.type != MsgType::kOptimizerStateReply)
    throw Error(ErrorCode::kProtocol,
                fmt::format("a worker does not accept {}", ps::to_string(h.type)));
  return requests_.dest(peer, h.request_id, size);
}

void Worker::Impl::on_message(ps::Peer& peer, const Header& h, std::span<const std::byte> payload,
                              const transport::Placement&) {
  if (h.type == MsgType::kRoute && peer.role() == ps::Role::kScheduler) return on_route(h);
  if (h.type == MsgType::kShutdown) {
    std::string why(reinterpret_cast<const char*>(payload.data()), payload.size());
    if (h.shutdown_code() != ErrorCode::kOk)
      PSRT_LOG_ERROR("the scheduler stopped the job: {}", why);
    {
      std::lock_guard lock(state_mu_);
      ended_ = why.empty() ? "stopped by the scheduler" : why;
    }
    requests_.fail_all(Status(ErrorCode::kCancelled, "the job was stopped: " + why));
    return;
  }
  if (h.type == MsgType::kError && h.reroute() && keep_for_route(peer, h, payload)) return;
  if (!requests_.complete(peer, h, payload) && h.type == MsgType::kError) {
    std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
    PSRT_LOG_ERROR("{} reported: {}", peer.name(), text);
  }
}

void Worker::Impl::on_peer_closed(ps::Peer& peer, const Status& why) {
  if (replicas_ > 1 && peer.role() == ps::Role::kServer) {
    // Its slices' backup takes over: the scheduler says which (ROUTE), and what this worker sent
    // it goes there again. The operations' own timeout bounds the wait.
    server_closed(peer.rank());
    {
      std::lock_guard lock(state_mu_);
      if (closed_ || !ended_.empty()) return;  // this worker or the job is ending
    }
    PSRT_LOG_WARN("lost {}: {}; its operations wait for the server that takes over its slices",
                  peer.name(), why.message());
    return;
  }
  requests_.fail_peer(peer, why);
}

// --- the public Worker ---

Worker Worker::join(const WorkerOptions& options) {
  return Worker(std::make_unique<Impl>(options));
}
Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::Worker(Worker&&) noexcept = default;
Worker& Worker::operator=(Worker&&) noexcept = default;
Worker::~Worker() = default;

int Worker::rank() const {
  return impl_->rank();
}
int Worker::num_workers() const {
  return impl_->num_workers();
}
bool Worker::joined() const {
  return impl_->joined();
}
int Worker::num_servers() const {
  return impl_->num_servers();
}
std::uint64_t Worker::resume_round() const {
  return impl_->resume_round();
}
void Worker::set_optimizer(const OptimizerConfig& c) {
  impl_->set_optimizer(c);
}
void Worker::set_learning_rate(float lr) {
  impl_->set_learning_rate(lr);
}
void Worker::init(Key key, std::span<const float> value) {
  impl_->init(key, value, KeyUpdate::kOptimizer);
}
void Worker::init(Key key, std::span<const float> value, KeyUpdate update) {
  impl_->init(key, value, update);
}

Handle Worker::push(Key key, std::span<const float> grad) {
  return push(key, ConstBuffer{grad.data(), grad.size_bytes()}, GradType::kF32);
}

Handle Worker::push(Key key, const std::uint16_t* grad, std::size_t count, GradType type) {
  if (type == GradType::kF32)
    throw Error(ErrorCode::kInvalidArgument, "push of 16-bit data as GradType::kF32");
  return push(key, ConstBuffer{grad, count * 2}, type);
}

Handle Worker::pull(Key key, std::span<float> out) {
  return pull(key, MutableBuffer{out.data(), out.size_bytes()});
}

Handle Worker::push_pull(Key key, std::span<const float> grad, std::span<float> out) {
  return push_pull(key, ConstBuffer{grad.data(), grad.size_bytes()}, GradType::kF32,
                   MutableBuffer{out.data(), out.size_bytes()});
}

std::uint64_t Worker::version(Key key) {
  const Handle h = impl_->version(key);
  h.wait();
  return h.version();
}
void Worker::barrier() {
  impl_->barrier();
}
void Worker::shutdown() {
  if (impl_) impl_->shutdown();
}

}  // namespace psrt
