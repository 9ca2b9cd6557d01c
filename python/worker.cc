#include "python/worker.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "kernels/fused_adam.h"
#include "psrt/psrt.h"
#include "python/buffers.h"
#include "python/handle.h"
#include "runtime/env_contract.h"

namespace py = pybind11;

namespace psrt::python {
namespace {

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class PyWorker {
 public:
  PyWorker(Worker worker, std::chrono::milliseconds op_timeout)
      : worker_(std::make_unique<Worker>(std::move(worker))), op_timeout_(op_timeout) {}
  ~PyWorker() {
    // Waits for the outstanding operations (bounded) before their tensors are released.
    if (finalizing()) {
      worker_.reset();
    } else {
      py::gil_scoped_release release;
      worker_.reset();
    }
    in_flight_.take();
  }

  static std::unique_ptr<PyWorker> from_env() {
    const auto op_timeout = runtime::env_ms("PSRT_OP_TIMEOUT_MS");
    py::gil_scoped_release release;
    return std::make_unique<PyWorker>(Worker::from_env(), op_timeout);
  }
  static std::unique_ptr<PyWorker> join(const WorkerOptions& o) {
    py::gil_scoped_release release;
    return std::make_unique<PyWorker>(Worker::join(o), o.op_timeout);
  }

  Worker& get() const {
    if (!worker_)
      throw Error(ErrorCode::kCancelled, "this psrt.Worker was shut down: join a new one");
    return *worker_;
  }

  void init(Key key, py::handle value, const std::string& update) {
    Memory m = memory_of(value, Use::kValue, fmt::format("init(key {}): value", key));
    const std::span<const float> floats(static_cast<const float*>(m.buffer.data), m.count);
    const KeyUpdate u = key_update(update);
    py::gil_scoped_release release;
    get().init(key, floats, u);
  }

  static KeyUpdate key_update(const std::string& name) {
    if (name == "optimizer") return KeyUpdate::kOptimizer;
    if (name == "mean") return KeyUpdate::kMean;
    if (name == "sum") return KeyUpdate::kSum;
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("init(update='{}'): use 'optimizer', 'mean' or 'sum'", name));
  }

  PyHandle push(Key key, py::handle grad) {
    const std::string what = fmt::format("push(key {})", key);
    Memory g = memory_of(grad, Use::kGradient, what + ": grad");
    return start(what, {g.owner}, [&] { return get().push(key, g.buffer, g.type); });
  }
  PyHandle pull(Key key, py::handle out) {
    const std::string what = fmt::format("pull(key {})", key);
    Memory o = memory_of(out, Use::kWeights, what + ": out");
    return start(what, {o.owner}, [&] { return get().pull(key, o.buffer); });
  }
  PyHandle push_pull(Key key, py::handle grad, py::handle out) {
    const std::string what = fmt::format("push_pull(key {})", key);
    Memory g = memory_of(grad, Use::kGradient, what + ": grad");
    Memory o = memory_of(out, Use::kWeights, what + ": out");
    return start(what, {g.owner, o.owner},
                 [&] { return get().push_pull(key, g.buffer, g.type, o.buffer); });
  }

  // A key's optimizer state as a dict: "momentum" and "exp_avg_sq" (bytes of float32, or None),
  // "steps", "version".
  py::dict optimizer_state(Key key) {
    OptimizerState st;
    {
      Worker& w = get();
      py::gil_scoped_release release;
      st = w.optimizer_state(key);
    }
    auto part = [](const std::vector<float>& v) -> py::object {
      if (v.empty()) return py::none();
      return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    };
    py::dict d;
    d["momentum"] = part(st.momentum);
    d["exp_avg_sq"] = part(st.exp_avg_sq);
    d["steps"] = st.steps;
    d["version"] = st.version;
    return d;
  }

  void set_optimizer_state(Key key, py::handle momentum, py::handle exp_avg_sq,
                           std::uint64_t steps) {
    OptimizerState st;
    st.steps = steps;
    auto take = [key](py::handle obj, const char* name, std::vector<float>& into) {
      if (obj.is_none()) return;
      Memory m =
          memory_of(obj, Use::kValue, fmt::format("set_optimizer_state(key {}): {}", key, name));
      const auto* f = static_cast<const float*>(m.buffer.data);
      into.assign(f, f + m.count);
    };
    take(momentum, "momentum", st.momentum);
    take(exp_avg_sq, "exp_avg_sq", st.exp_avg_sq);
    Worker& w = get();
    py::gil_scoped_release release;
    w.set_optimizer_state(key, st);
  }

  void shutdown() {
    if (!worker_) return;
    {
      py::gil_scoped_release release;
      worker_->shutdown();
    }
    in_flight_.take();
  }

  template <typename Call>
  PyHandle start(const std::string& what, std::vector<py::object> keep, Call&& call) {
    in_flight_.sweep();
    auto op = std::make_shared<Operation>();
    op->what = what;
    op->keep = std::move(keep);
    {
      py::gil_scoped_release release;
      op->handle = call();
    }
    if (!op->over()) in_flight_.add(op);
    return PyHandle(std::move(op), op_timeout_);
  }

  template <typename R, typename... A>
  static auto blocking(R (Worker::*method)(A...)) {
    return [method](PyWorker& self, A... args) {
      Worker& w = self.get();
      py::gil_scoped_release release;
      return (w.*method)(args...);
    };
  }

 private:
  std::unique_ptr<Worker> worker_;
  std::chrono::milliseconds op_timeout_;
  InFlight in_flight_;
};

std::chrono::milliseconds ms(std::int64_t v) {
  return std::chrono::milliseconds(v);
}

}  // namespace

void bind_worker(py::module_& m) {
  py::class_<PyWorker>(m, "Worker",
                       "One worker of a psrt job (psrt::Worker). Every call takes tensors in "
                       "place: torch.Tensor (CPU float32; gradients also float16/bfloat16) or a "
                       "buffer-protocol object such as a NumPy array, never copied.")
      .def_static("from_env", &PyWorker::from_env,
                  "Joins the job described by the PSRT_* environment that psrun sets. Blocking.")
      .def_static(
          "join",
          [](std::string scheduler, std::string transport, std::string secret, int rank,
             std::int64_t op_timeout_ms, std::int64_t connect_timeout_ms, std::int64_t heartbeat_ms,
             std::int64_t spin_us, bool cuda_ipc, bool secure) {
            WorkerOptions o;
            o.scheduler = std::move(scheduler);
            o.transport = std::move(transport);
            o.secret = std::move(secret);
            o.rank = rank;
            o.op_timeout = ms(op_timeout_ms);
            o.connect_timeout = ms(connect_timeout_ms);
            o.heartbeat = ms(heartbeat_ms);
            o.spin = std::chrono::microseconds(spin_us);
            o.cuda_ipc = cuda_ipc;
            o.secure = secure;
            return PyWorker::join(o);
          },
          py::kw_only(), py::arg("scheduler"), py::arg("transport"), py::arg("secret"),
          py::arg("rank") = -1, py::arg("op_timeout_ms") = 300'000,
          py::arg("connect_timeout_ms") = 30'000, py::arg("heartbeat_ms") = 1'000,
          py::arg("spin_us") = 100, py::arg("cuda_ipc") = true, py::arg("secure") = false,
          "Joins a job from explicit options (psrt::WorkerOptions). Blocking.")
      .def_property_readonly("rank", [](const PyWorker& w) { return w.get().rank(); })
      .def_property_readonly("num_workers", [](const PyWorker& w) { return w.get().num_workers(); })
      .def_property_readonly(
          "joined", [](const PyWorker& w) { return w.get().joined(); },
          "True when this worker joined a job already running: skip start-up barriers, pull "
          "the current weights (docs/elastic.md)")
      .def_property_readonly("num_servers", [](const PyWorker& w) { return w.get().num_servers(); })
      .def_property_readonly(
          "local_rank",
          [](const PyWorker& w) {
            w.get();
            const char* v = std::getenv("PSRT_LOCAL_RANK");
            return v && *v ? static_cast<int>(runtime::env_int("PSRT_LOCAL_RANK", 0, 1 << 20)) : 0;
          },
          "This worker's index among the workers on its host (PSRT_LOCAL_RANK, as torchrun's "
          "LOCAL_RANK; 0 when the launcher did not say)")
      .def_property_readonly("resume_round",
                             [](const PyWorker& w) { return w.get().resume_round(); })
      .def(
          "set_optimizer",
          [](PyWorker& self, float lr, float momentum, float dampening, float weight_decay,
             bool nesterov, float max_grad_norm, bool skip_nonfinite, const std::string& optimizer,
             std::pair<float, float> betas, float eps) {
            OptimizerConfig c{.lr = lr,
                              .momentum = momentum,
                              .dampening = dampening,
                              .weight_decay = weight_decay,
                              .nesterov = nesterov,
                              .beta1 = betas.first,
                              .beta2 = betas.second,
                              .eps = eps,
                              .max_grad_norm = max_grad_norm,
                              .skip_nonfinite = skip_nonfinite};
            if (!kernels::parse_algorithm(optimizer, c.algorithm))
              throw Error(ErrorCode::kInvalidArgument,
                          "set_optimizer(optimizer='" + optimizer +
                              "'): the servers run 'sgd', 'adam' or 'adamw'");
            Worker& w = self.get();
            py::gil_scoped_release release;
            w.set_optimizer(c);
          },
          py::kw_only(), py::arg("lr") = 0.01f, py::arg("momentum") = 0.f,
          py::arg("dampening") = 0.f, py::arg("weight_decay") = 0.f, py::arg("nesterov") = false,
          py::arg("max_grad_norm") = 0.f, py::arg("skip_nonfinite") = false,
          py::arg("optimizer") = "sgd", py::arg("betas") = std::pair<float, float>(0.9f, 0.999f),
          py::arg("eps") = 1e-8f,
          "Sets the servers' optimizer: optimizer='sgd' (torch.optim.SGD's lr, momentum, "
          "dampening, weight_decay, nesterov), 'adam' or 'adamw' (torch.optim.Adam/AdamW's lr, "
          "betas, eps, weight_decay). Blocking; the same values on every worker, before the "
          "first push.")
      .def("set_learning_rate", PyWorker::blocking(&Worker::set_learning_rate), py::arg("lr"),
           "The learning rate of the rounds of this worker's pushes from now on (0 = the "
           "configured one). Non-blocking.")
      .def("init", &PyWorker::init, py::arg("key"), py::arg("value"),
           py::arg("update") = "optimizer",
           "Stores value (float32) as key's initial weights unless the key exists. Blocking. "
           "update: what the servers do with the key's rounds: 'optimizer' (the job's optimizer "
           "updates the weights), or 'mean' / 'sum' (aggregate only: after a round the key's value "
           "is the mean / sum of that round's gradients; needs --mode sync and cpu servers).")
      .def("push", &PyWorker::push, py::arg("key"), py::arg("grad"),
           "Sends a gradient (float32, float16 or bfloat16) for key. Returns a Handle.")
      .def("pull", &PyWorker::pull, py::arg("key"), py::arg("out"),
           "Receives key's weights into out (float32), in place. Returns a Handle.")
      .def("push_pull", &PyWorker::push_pull, py::arg("key"), py::arg("grad"), py::arg("out"),
           "push + pull in one message per slice: out = the weights after the round that "
           "includes grad. Returns a Handle.")
      .def("version", PyWorker::blocking(&Worker::version), py::arg("key"),
           "The version of key's weights on the servers now (their update count of the key; "
           "sync: its rounds; 0 = the initial value), the minimum over its slices, without "
           "pulling the weights or waiting for this worker's pushes. Blocking (bounded by "
           "PSRT_OP_TIMEOUT_MS); psrt.Error with code NOT_FOUND for a key never initialised.")
      .def("barrier", PyWorker::blocking(&Worker::barrier),
           "Blocks until every live worker has called barrier().")
      .def("optimizer_state", &PyWorker::optimizer_state, py::arg("key"),
           "The servers' optimizer state of key (psrt::Worker::optimizer_state): a dict with "
           "'momentum' (SGD's buffer or Adam's exp_avg) and 'exp_avg_sq' (Adam), each bytes of "
           "float32 or None when absent, 'steps' (Adam's step count) and 'version'. Read it "
           "between rounds (sync mode, after this worker's pulls). Blocking.")
      .def("set_optimizer_state", &PyWorker::set_optimizer_state, py::arg("key"), py::kw_only(),
           py::arg("momentum") = py::none(), py::arg("exp_avg_sq") = py::none(),
           py::arg("steps") = 0,
           "Stores key's optimizer state on the servers (float32 CPU tensors or buffers of the "
           "key's size; steps: Adam's step count), between rounds with no gradient queued "
           "(psrt::Worker::set_optimizer_state). Blocking.")
      .def("request_checkpoint", PyWorker::blocking(&Worker::request_checkpoint), py::arg("round"),
           "Asks the job for a checkpoint of round `round` into psrun's --checkpoint-dir (every "
           "server's slices with their optimizer state, kept; a restarted job resumes there). "
           "Call it before this worker pushes round - 1. Non-blocking; psrt.Error "
           "INVALID_ARGUMENT when the job has no --checkpoint-dir.")
      .def("shutdown", &PyWorker::shutdown,
           "Leaves the job: waits for outstanding operations (bounded). Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWorker& self, py::args) { self.shutdown(); });
}

}  // namespace psrt::python
