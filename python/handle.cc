#include "python/handle.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>

namespace py = pybind11;

namespace psrt::python {
namespace {
// Waits are cut into slices this long, to see Ctrl-C between them.
constexpr std::chrono::milliseconds kSignalSlice{50};
}  // namespace

void InFlight::add(std::shared_ptr<Operation> op) {
  ops_.push_back(std::move(op));
}

void InFlight::sweep() {
  std::erase_if(ops_, [](const auto& op) { return op->over(); });
}

std::vector<std::shared_ptr<Operation>> InFlight::take() {
  return std::exchange(ops_, {});
}

bool PyHandle::wait(std::optional<double> timeout_s) const {
  using Clock = std::chrono::steady_clock;
  if (timeout_s && !(std::isfinite(*timeout_s) && *timeout_s >= 0))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("wait(timeout={}): give a finite number of seconds >= 0, or None", *timeout_s));
  const auto limit =
      timeout_s
          ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_s))
          : std::chrono::duration_cast<Clock::duration>(op_timeout_);
  const auto deadline = Clock::now() + limit;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    bool done = false;
    {
      py::gil_scoped_release release;
      done = op_->handle.wait_for(std::clamp(left, std::chrono::milliseconds(0), kSignalSlice));
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (Clock::now() >= deadline) {
      if (timeout_s) return false;
      throw Error(ErrorCode::kTimeout,
                  fmt::format("{} did not complete within {} ms (PSRT_OP_TIMEOUT_MS)", op_->what,
                              op_timeout_.count()));
    }
  }
  // Over: the objects can go (the in-flight list drops its copy of the operation later).
  if (op_->handle.sent()) op_->keep.clear();
  op_->handle.wait();  // complete: returns or throws the operation's error at once
  return true;
}

void bind_handle(py::module_& m) {
  py::class_<PyHandle>(m, "Handle",
                       "The completion of one push, pull or push_pull. The tensors it uses are "
                       "kept alive until it is over, whether or not this Handle is kept.")
      .def("wait", &PyHandle::wait, py::arg("timeout") = py::none(),
           "Blocks until the operation completes and raises its psrt.Error (the GIL is released; "
           "Ctrl-C raises KeyboardInterrupt). With timeout (seconds): False if still running then. "
           "Without: bounded by PSRT_OP_TIMEOUT_MS. Returns True when complete.")
      .def("ready", &PyHandle::ready, "True once complete, without blocking.")
      .def("sent", &PyHandle::sent,
           "True once every byte this operation sends has left the caller's buffer (a "
           "push_pull's grad may be reused while `out` is still pending).")
      .def("version", &PyHandle::version,
           "The version of the weights a completed pull or push_pull received: the servers' "
           "update count of the key (in sync its rounds; 0 = the initial value), the lowest over "
           "its slices. 0 for a push or an operation not complete.")
      .def("dropped", &PyHandle::dropped,
           "Backup workers (psrun --backup-workers): how many of this worker's pushes of the "
           "key's slices the servers dropped as late since its previous pull (their round ran "
           "without it; the weights received are newer). 0 for a push or an operation not "
           "complete.")
      .def("round_workers", &PyHandle::round_workers,
           "The fewest gradients the update that made a received slice's version averaged (0 "
           "for the initial value).")
      .def("__repr__", [](const PyHandle& h) {
        return fmt::format("<psrt.Handle {} {}>", h.what(), h.ready() ? "complete" : "running");
      });
}

}  // namespace psrt::python
