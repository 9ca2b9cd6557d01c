"""psrt.torch: train a PyTorch model through the parameter servers.

Wrap the torch.optim.SGD you built; the servers run it on the mean of the workers' gradients:

    import psrt.torch
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = psrt.torch.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt.optimizer, step_size=10)   # optional
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are pushed from here on
        opt.step()                        # returns without waiting for the pulls
        sched.step()                      # the next step's gradients carry the new rate
    opt.synchronize()                     # the model holds the final weights

How it works (as the C++ integration, include/psrt/torch.h):
- Every trained parameter is a key (psrt.key_of(name), FNV-1a 64 of its name). A tensor hook
  sends each gradient as autograd produces it (one push_pull per slice) while backward goes on;
  the reply lands in the parameter's own storage, without a copy. Every gradient is handed to
  the transport as it arrives (the C++ integration with push_credit_bytes = 0). With
  grad_dtype float16/bfloat16 a gradient goes as a push then a pull.
- A forward pre-hook on every module waits for the pulls of that module's own parameters, so the
  next forward overlaps with the pulls of later layers; nothing to add to the model. A parameter
  no forward waited for (used outside any module) makes step() wait for every pull.
- On construction rank 0's values become the job's initial weights (a resumed job keeps its
  checkpoint's) and every worker pulls them: all workers start equal.
- Parameters that do not require a gradient (frozen) are broadcast from rank 0 once and never
  pushed. Tied parameters (one tensor under two names) are one key: named_parameters() lists
  them once. Several backward passes before one step() (gradient accumulation) are refused.
- A trained parameter that backward did not reach in a step gets a zero gradient (every key
  takes part in every round): momentum and weight decay still move it, where torch.optim.SGD
  would skip it.
- BatchNorm running statistics are buffers, not parameters: they stay local to each worker
  (every worker holds the same weights and draws an i.i.d. shard, so each estimates the same
  statistics); evaluate or save rank 0's.
- The servers run torch.optim.SGD (lr, momentum, dampening, weight_decay, nesterov) with one
  set of hyper-parameters: other optimizers, several param groups that differ, and
  maximize=True are refused. The learning rate of param_groups[0] when a gradient is pushed is
  the rate of its round, so torch.optim.lr_scheduler schedulers work per step.
- From a gradient's hook until the next forward (or synchronize()), the parameter's pulled
  weights may land at any moment: call synchronize() before reading or saving parameters.
"""

import torch

import psrt

__all__ = ["DistributedOptimizer", "SUPPORTED"]

SUPPORTED = "torch.optim.SGD (lr, momentum, dampening, weight_decay, nesterov)"
_SGD_KEYS = ("lr", "momentum", "dampening", "weight_decay", "nesterov")


class _Slot:
    __slots__ = ("name", "key", "param", "data", "trained", "reached", "gated", "pull", "zeros")

    def __init__(self, name, param):
        self.name = name
        self.key = psrt.key_of(name)
        self.param = param
        self.data = param.detach()  # the parameter's own storage, where pulls land
        self.trained = param.requires_grad
        self.reached = False
        self.gated = False
        self.pull = None  # Handle of the outstanding pull into `data`
        self.zeros = None


def _error(code, message):
    e = psrt.Error(message)
    e.code = code
    return e


def _check_optimizer(optimizer):
    if type(optimizer) is not torch.optim.SGD:
        raise TypeError(
            f"psrt.torch.DistributedOptimizer: the servers run {SUPPORTED}; "
            f"{type(optimizer).__module__}.{type(optimizer).__qualname__} cannot run there. "
            "Build a torch.optim.SGD, or train without psrt")
    groups = optimizer.param_groups
    first = {k: groups[0][k] for k in _SGD_KEYS}
    for i, g in enumerate(groups[1:], 1):
        other = {k: g[k] for k in _SGD_KEYS}
        if other != first:
            raise ValueError(
                "psrt.torch.DistributedOptimizer: param group 0 has " + repr(first) +
                f" but group {i} has " + repr(other) +
                "; the servers run one set of SGD hyper-parameters for every parameter")
    if groups[0].get("maximize", False):
        raise ValueError("psrt.torch.DistributedOptimizer: SGD(maximize=True) is not supported "
                         f"by the servers; they run {SUPPORTED}")
    return first


def _named(optimizer, named_parameters):
    """(name, parameter) for every parameter of the optimizer, in named_parameters' order."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        return [(f"param.{i}", p) for i, p in enumerate(params)]
    names = {}
    order = []
    for name, p in named_parameters:
        if id(p) in names:
            raise ValueError(
                f"psrt.torch.DistributedOptimizer: parameters '{names[id(p)]}' and '{name}' are "
                "one tensor; pass model.named_parameters() (it lists tied parameters once)")
        names[id(p)] = name
        order.append(p)
    wanted = {id(p) for p in params}
    missing = [i for i, p in enumerate(params) if id(p) not in names]
    if missing:
        raise ValueError(
            f"psrt.torch.DistributedOptimizer: {len(missing)} parameter(s) of the optimizer "
            "(first at index {}) are not in named_parameters".format(missing[0]))
    return [(names[id(p)], p) for p in order if id(p) in wanted]


class DistributedOptimizer:
    """Runs `optimizer` (a torch.optim.SGD) on the job's parameter servers.

    named_parameters: model.named_parameters() (the keys are the names; without it the
    parameters are named by their position in the optimizer). worker: a psrt.Worker (default
    psrt.Worker.from_env(), shut down by close()). grad_dtype: torch.float32, or torch.float16 /
    torch.bfloat16 to halve the bytes pushed (the servers accumulate in fp32).

    Blocking: the constructor (joins, broadcasts rank 0's parameters), synchronize(), and step()
    when the last forward did not wait for every parameter. Errors raise psrt.Error from
    step(), synchronize(), backward() or the forward that waits.
    """

    def __init__(self, optimizer, named_parameters=None, worker=None,
                 grad_dtype=torch.float32):
        sgd = _check_optimizer(optimizer)
        if grad_dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"grad_dtype {grad_dtype}: use torch.float32, torch.float16 or "
                             "torch.bfloat16")
        self.optimizer = optimizer
        self._grad_dtype = grad_dtype
        self._owns_worker = worker is None
        self.worker = psrt.Worker.from_env() if worker is None else worker
        self._slots = []
        keys = {}
        for name, p in _named(optimizer, named_parameters):
            self._check_parameter(name, p)
            s = _Slot(name, p)
            if s.key in keys:
                raise ValueError(f"psrt.torch.DistributedOptimizer: parameters '{keys[s.key]}' "
                                 f"and '{name}' map to the same key {s.key}; rename one")
            keys[s.key] = name
            self._slots.append(s)
        if not any(s.trained for s in self._slots):
            raise ValueError("psrt.torch.DistributedOptimizer: no parameter requires a gradient")
        self._slot_of = {id(s.param): s for s in self._slots}
        self._lr = float(sgd["lr"])  # the rate the worker stamps on its pushes now
        self._steps = 0
        self._join(sgd)
        self._hooks = [s.param.register_hook(self._make_hook(s))
                       for s in self._slots if s.trained]
        self._pre_hook = torch.nn.modules.module.register_module_forward_pre_hook(
            self._pre_forward)

    # --- construction ---

    @staticmethod
    def _check_parameter(name, p):
        if p.device.type != "cpu" and p.device.type != "cuda":
            raise _error(psrt.ErrorCode.UNSUPPORTED,
                         f"parameter '{name}' is on {p.device}: psrt trains CPU and CUDA tensors")
        if p.dtype != torch.float32:
            raise TypeError(f"parameter '{name}' is {p.dtype}; psrt keeps fp32 weights: "
                            "convert the model with model.float()")
        if not p.is_contiguous():
            raise ValueError(f"parameter '{name}' is not contiguous")

    def _join(self, sgd):
        w = self.worker
        w.set_optimizer(lr=float(sgd["lr"]), momentum=float(sgd["momentum"]),
                        dampening=float(sgd["dampening"]),
                        weight_decay=float(sgd["weight_decay"]), nesterov=bool(sgd["nesterov"]))
        if w.rank == 0:
            for s in self._slots:
                w.init(s.key, s.data if s.data.device.type == "cpu" else s.data.cpu())
        w.barrier()
        pulls = [w.pull(s.key, s.data) for s in self._slots]
        for h in pulls:
            h.wait()
        w.set_learning_rate(0.0)  # the configured rate, until param_groups' lr changes

    # --- hooks ---

    def _make_hook(self, slot):
        def hook(grad):
            self._on_grad(slot, grad)
        return hook

    def _on_grad(self, s, grad):
        if s.reached:
            raise _error(
                psrt.ErrorCode.INVALID_ARGUMENT,
                f"parameter '{s.name}' received a second gradient before step(): call step() "
                "after every backward (accumulating several backward passes into one step is "
                "not supported)")
        s.reached = True
        g = grad.detach()
        if g.dtype != self._grad_dtype:
            g = g.to(self._grad_dtype)
        if not g.is_contiguous():
            g = g.contiguous()
        self._stamp_lr()
        if self._grad_dtype == torch.float32:
            s.pull = self.worker.push_pull(s.key, g, s.data)
        else:
            self.worker.push(s.key, g)
            s.pull = self.worker.pull(s.key, s.data)

    def _stamp_lr(self):
        lr = float(self.optimizer.param_groups[0]["lr"])
        if lr != self._lr:
            if not lr >= 0.0 or lr == float("inf"):
                raise ValueError(f"learning rate {lr} is not a finite number >= 0")
            self.worker.set_learning_rate(lr)
            self._lr = lr

    def _pre_forward(self, module, _inputs):
        for p in module._parameters.values():
            s = self._slot_of.get(id(p)) if p is not None else None
            if s is not None:
                s.gated = True
                if s.pull is not None:
                    h, s.pull = s.pull, None
                    h.wait()
        return None

    # --- the optimizer's interface ---

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=True):
        """Drops the local .grad tensors (what was pushed is held by the pushes themselves)."""
        for s in self._slots:
            if s.param.grad is not None:
                if set_to_none:
                    s.param.grad = None
                else:
                    s.param.grad.detach_().zero_()

    def step(self, closure=None):
        """Ends the step: pushes a zero gradient for every trained parameter backward did not
        reach (every key takes part in every round), then returns; the pulls complete in the
        background. Waits for every pull when the last forward did not wait for every one."""
        if closure is not None:
            raise ValueError("DistributedOptimizer.step(closure): closures are not supported")
        gated = True
        for s in self._slots:
            if s.trained and not s.reached:
                if s.zeros is None:
                    s.zeros = torch.zeros_like(s.data, dtype=self._grad_dtype)
                self._on_grad(s, s.zeros)
            s.reached = False
            gated = gated and (s.gated or not s.trained)
            s.gated = False
        self._steps += 1
        # torch.optim.lr_scheduler counts optimizer steps to warn about a scheduler stepped
        # first; the servers did the wrapped optimizer's step.
        if hasattr(self.optimizer, "_step_count"):
            self.optimizer._step_count += 1
        if not gated:
            self.synchronize()

    def synchronize(self):
        """Waits for every outstanding pull: the model then holds the servers' weights."""
        for s in self._slots:
            if s.pull is not None:
                h, s.pull = s.pull, None
                h.wait()

    @property
    def steps(self):
        return self._steps

    @property
    def parameter_names(self):
        return [s.name for s in self._slots]

    def state_dict(self):
        raise NotImplementedError(
            "the optimizer state (momentum) lives on the servers: checkpoint the job with psrun "
            "--checkpoint-dir")

    def close(self):
        """Removes the hooks, waits for every outstanding operation and, when the optimizer
        made its worker, shuts it down. Idempotent."""
        if self._pre_hook is None:
            return
        self._pre_hook.remove()
        self._pre_hook = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        try:
            self.synchronize()
        finally:
            if self._owns_worker:
                self.worker.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
