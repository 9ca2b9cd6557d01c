// The worker's send windows (PSRT_SEND_WINDOW, ps/send_window.h): a PUSH or PUSH_PULL slice
// waits in its server's window and goes out as a PUSH once it fits; the server's PUSH_ACK (sent
// when it holds the gradient, whatever the other workers do) frees the window, so a window never
// waits on another worker and cannot deadlock a synchronous round. A PUSH_PULL's PULL follows
// its PUSH_ACK: the server answers it once the round that holds the push is applied, exactly as
// it would have answered the PUSH_PULL. A PULL takes no room but waits in the window too, behind
// the queued pushes of its slice, so that it never overtakes them (a PUSH then a PULL of the
// same slice must reach the server in that order, as without a window).
#include <fmt/core.h>

#include "base/exception_status.h"
#include "ps/worker_impl.h"

namespace psrt {

using ps::Header;
using ps::MsgType;

bool Worker::Impl::windowed(const Header& h) const {
  return !windows_.empty() &&
         (h.type == MsgType::kPush || h.type == MsgType::kPushPull || h.type == MsgType::kPull);
}

void Worker::Impl::send_windowed(WindowedSend w) {
  auto& window = *windows_[w.server];
  const std::uint64_t priority = w.priority;
  if (w.header.type == MsgType::kPull)
    return window.submit(priority, 0, [this, w = std::move(w)] { send_pull(w, true); });
  const std::size_t bytes = w.bytes;
  window.submit(priority, bytes, [this, w = std::move(w)] { start_windowed(w); });
}

void Worker::Impl::start_windowed(const WindowedSend& w) {
  std::uint64_t id = 0;
  try {
    const bool then_pull = w.header.type == MsgType::kPushPull;
    ps::Requests::Done acked = [this, w, then_pull](const Status& status, const Header& reply,
                                                    std::span<const std::byte> payload) {
      if (then_pull && status.ok())
        send_pull(w, false);
      else
        w.done(status, reply, payload);
      windows_[w.server]->release(w.bytes);
    };
    id = requests_.add(*servers_[w.server], then_pull ? w.what + " (its PUSH)" : w.what,
                       std::move(acked), {});
    Header h = w.header;
    h.type = MsgType::kPush;
    h.request_id = id;
    w.send_grad(h, [this, id, sent = w.sent](const Status& status) {
      sent(status);
      if (!status.ok()) requests_.fail(id, status);
    });
  } catch (...) {  // e.g. no memory: this slice fails, the window goes on
    const Status why = current_exception_status(w.what);
    w.sent(why);
    if (id == 0 || !requests_.fail(id, why)) {
      w.done(why, Header{}, {});
      windows_[w.server]->release(w.bytes);
    }
  }
}

void Worker::Impl::send_pull(const WindowedSend& w, bool report_sent) {
  Header h;
  h.type = MsgType::kPull;
  h.dtype = ps::WireType::kF32;
  h.key = w.header.key;
  h.offset = w.header.offset;
  h.count = w.header.count;
  h.total = w.header.total;
  h.set_slice(w.header.slice());
  std::uint64_t id = 0;
  try {
    id = requests_.add(*servers_[w.server], w.what, w.done, w.dest);
    h.request_id = id;
    servers_[w.server]->send(h, {}, [this, id, report_sent, sent = w.sent](const Status& status) {
      if (report_sent) sent(status);
      if (!status.ok()) requests_.fail(id, status);
    });
  } catch (...) {
    const Status why = current_exception_status(w.what);
    if (report_sent) w.sent(why);
    if (id == 0 || !requests_.fail(id, why)) w.done(why, Header{}, {});
  }
}

}  // namespace psrt
