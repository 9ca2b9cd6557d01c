// psrt.Handle: the completion of one push, pull or push_pull, and the Python objects whose memory
// it uses, kept alive until it is over (also when the caller drops the Handle or the tensor).
#pragma once
#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psrt/psrt.h"

namespace psrt::python {

struct Operation {
  Handle handle;
  std::string what;                    // "push_pull(key 7)", for errors
  std::vector<pybind11::object> keep;  // released with the GIL held only
  bool over() const { return handle.ready() && handle.sent(); }
};

// Operations that are not over yet, whoever still holds their Handle. Swept (with the GIL) at
// each new operation; drained at shutdown.
class InFlight {
 public:
  void add(std::shared_ptr<Operation> op);
  void sweep();
  std::vector<std::shared_ptr<Operation>> take();

 private:
  std::vector<std::shared_ptr<Operation>> ops_;
};

class PyHandle {
 public:
  PyHandle(std::shared_ptr<Operation> op, std::chrono::milliseconds op_timeout)
      : op_(std::move(op)), op_timeout_(op_timeout) {}
  // Blocks (GIL released) until the operation completes and raises its psrt.Error; with a
  // timeout in seconds, returns False if it is still running then. Without one, bounded by
  // PSRT_OP_TIMEOUT_MS like the C++ wait(). Ctrl-C raises KeyboardInterrupt within ~50 ms.
  bool wait(std::optional<double> timeout_s) const;
  bool ready() const { return op_->handle.ready(); }
  bool sent() const { return op_->handle.sent(); }
  std::uint64_t version() const { return op_->handle.version(); }
  std::uint64_t dropped() const { return op_->handle.dropped(); }
  std::uint32_t round_workers() const { return op_->handle.round_workers(); }
  const std::string& what() const { return op_->what; }

 private:
  std::shared_ptr<Operation> op_;
  std::chrono::milliseconds op_timeout_;
};

void bind_handle(pybind11::module_& m);

}  // namespace psrt::python
