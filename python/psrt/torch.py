"""psrt.torch: train a PyTorch model through the parameter servers.

Wrap the optimizer you built. Two modes (docs/migrating.md says which to pick):

- mode="server": the servers run the optimizer (torch.optim.SGD: lr, momentum, dampening,
  weight_decay, nesterov) on the mean of the workers' gradients; the workers only push gradients
  and pull weights. Least work and traffic per worker; the gradients are pushed as backward
  computes them, so what the script does to .grad after backward does not reach the servers.
- mode="sum": the servers only average (aggregate-only keys, psrt/key_update.h); every worker
  receives the averaged gradients into .grad and runs ITS OWN optimizer (any torch.optim one, any
  param groups, schedulers, clipping, GradScaler) locally, as Horovod and BytePS do.
- mode="auto" (the default): "server" when the servers can run the optimizer and no clipping is
  asked for (max_grad_norm, psrun --max-grad-norm); "sum" otherwise. The chosen mode is opt.mode.

    import psrt.torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = psrt.torch.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are pushed from here on
        opt.step()

Sum mode takes the Horovod idioms as they are:

    loss.backward()
    opt.synchronize()                                     # .grad = the averaged gradients
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # torch's norm, whole model
    with opt.skip_synchronize():
        opt.step()

and accumulation: DistributedOptimizer(..., backward_passes_per_step=k) pushes every k-th
backward (the sum of the k gradients), and inside `with opt.no_sync():` backward passes only
accumulate locally (DDP's no_sync); the first backward outside pushes the accumulated sum. A
GradScaler's unscale_ (or `.grad /= scale` by hand) after synchronize() sees the same averaged
bits on every worker, so every worker skips the same steps.

How it works (as the C++ integration, include/psrt/torch.h):
- Every trained parameter is a key (psrt.key_of(name), FNV-1a 64 of its name; in sum mode its
  gradients go through the key of "grad/" + name). A tensor hook sends each gradient as
  autograd produces it (one push_pull per slice) while backward goes on. What it sends is a copy
  made in the hook: the script may touch .grad at once after backward (clip, unscale, zero),
  and what was pushed stays the gradient backward computed.
- Server mode: the reply lands in the parameter's own storage. A forward pre-hook on every
  module waits for the pulls of that module's own parameters, so the next forward overlaps with
  the pulls of later layers; a parameter no forward waited for makes step() wait for every pull.
  From a gradient's hook until the next forward (or synchronize()), the parameter's pulled
  weights may land at any moment: call synchronize() before reading or saving parameters.
- On construction rank 0's values become the job's initial weights (a resumed job keeps its
  checkpoint's) and every worker pulls them: all workers start equal.
- Parameters that do not require a gradient (frozen) are broadcast from rank 0 once and never
  pushed. Tied parameters (one tensor under two names) are one key: named_parameters() lists
  them once.
- A trained parameter that backward did not reach in a step gets a zero gradient (every key
  takes part in every round). Server mode: momentum and weight decay still move it, where
  torch.optim.SGD would skip it.
- BatchNorm running statistics are buffers, not parameters: they stay local to each worker
  (every worker holds the same weights and draws an i.i.d. shard, so each estimates the same
  statistics); evaluate or save rank 0's.
- Server mode runs torch.optim.SGD (lr, momentum, dampening, weight_decay, nesterov), Adam or
  AdamW (lr, betas, eps, weight_decay; docs/optimizers.md) on the servers with one set of
  hyper-parameters: several param groups that differ, maximize=True and amsgrad=True are
  refused there (sum mode runs any optimizer). The learning rate of param_groups[0] when a
  gradient is pushed is the rate of its round, so torch.optim.lr_scheduler schedulers work per
  step.
- From a gradient's hook until the next forward (or synchronize()), the parameter's pulled
  weights may land at any moment: call synchronize() before reading or saving parameters.
- Sum mode needs psrun --mode sync and cpu servers (--server-device cpu).
- state_dict() is torch's format in both modes: server mode fetches the servers' state (SGD's
  momentum_buffer, Adam/AdamW's step, exp_avg, exp_avg_sq) into self.optimizer.state first;
  load_state_dict() stores it back on the servers (every worker calls it, after construction).
  It resumes with any number of workers and servers; torch's own optimizer loads it too.
"""

import contextlib
import os

import torch

import psrt

__all__ = ["DistributedOptimizer", "SUPPORTED", "MODES", "device"]

MODES = ("auto", "server", "sum")

SUPPORTED = ("torch.optim.SGD (lr, momentum, dampening, weight_decay, nesterov), "
             "torch.optim.Adam and torch.optim.AdamW (lr, betas, eps, weight_decay)")
_SGD_KEYS = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
_ADAM_KEYS = ("lr", "betas", "eps", "weight_decay")


class _Slot:
    __slots__ = ("name", "key", "grad_key", "param", "data", "trained", "passes", "pushed",
                 "gated", "pull", "avg")

    def __init__(self, name, param):
        self.name = name
        self.key = psrt.key_of(name)
        self.grad_key = psrt.key_of("grad/" + name)  # sum mode: the averaged gradients
        self.param = param
        self.data = param.detach()  # the parameter's own storage, where pulls land
        self.trained = param.requires_grad
        self.passes = 0  # backward passes accumulated locally since the last push
        self.pushed = False  # this step's gradient was pushed
        self.gated = False
        self.pull = None  # Handle of the outstanding push_pull (or pull)
        self.avg = None  # sum mode: where the averaged gradient lands


def _error(code, message):
    e = psrt.Error(message)
    e.code = code
    return e


def _check_optimizer(optimizer):
    """The servers' optimizer for `optimizer`: set_optimizer's keyword arguments."""
    kind = type(optimizer)
    adam = kind in (torch.optim.Adam, torch.optim.AdamW)
    if kind is not torch.optim.SGD and not adam:
        raise TypeError(
            f"psrt.torch.DistributedOptimizer: the servers run {SUPPORTED}; "
            f"{kind.__module__}.{kind.__qualname__} cannot run there. "
            "Build one of those, or train without psrt")
    name = kind.__name__
    keys = _ADAM_KEYS if adam else _SGD_KEYS
    groups = optimizer.param_groups
    first = {k: groups[0][k] for k in keys}
    for i, g in enumerate(groups[1:], 1):
        other = {k: g[k] for k in keys}
        if other != first:
            raise ValueError(
                "psrt.torch.DistributedOptimizer: param group 0 has " + repr(first) +
                f" but group {i} has " + repr(other) +
                f"; the servers run one set of {name} hyper-parameters for every parameter")
    if groups[0].get("maximize", False):
        raise ValueError(f"psrt.torch.DistributedOptimizer: {name}(maximize=True) is not "
                         f"supported by the servers; they run {SUPPORTED}")
    if adam and groups[0].get("amsgrad", False):
        raise ValueError(f"psrt.torch.DistributedOptimizer: {name}(amsgrad=True) is not "
                         "supported by the servers: build it with amsgrad=False")
    if adam:
        b1, b2 = first["betas"]
        return dict(optimizer=name.lower(), lr=float(first["lr"]), betas=(float(b1), float(b2)),
                    eps=float(first["eps"]), weight_decay=float(first["weight_decay"]))
    return dict(lr=float(first["lr"]), momentum=float(first["momentum"]),
                dampening=float(first["dampening"]),
                weight_decay=float(first["weight_decay"]), nesterov=bool(first["nesterov"]))


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


def _from_bytes(data, like):
    """A tensor shaped, placed and typed like `like` from float32 bytes."""
    t = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(like.shape)
    return t.to(like.device)


def _host(t):
    """A float32 contiguous CPU copy of a state tensor (what set_optimizer_state reads)."""
    return t.detach().to("cpu", torch.float32).contiguous().reshape(-1)


def _env_max_grad_norm():
    """psrun --max-grad-norm, as the job's environment says it (0: none)."""
    v = os.environ.get("PSRT_MAX_GRAD_NORM", "0") or "0"
    try:
        x = float(v)
    except ValueError:
        raise ValueError(f"PSRT_MAX_GRAD_NORM={v!r} is not a number") from None
    if not (x >= 0.0 and x != float("inf")):
        raise ValueError(f"PSRT_MAX_GRAD_NORM={v!r}: a finite number >= 0")
    return x


def device():
    """This worker's torch.device: cuda:<PSRT_GPU> (the GPU psrun placed the rank near, counting
    only the node's workers), else cuda:<PSRT_LOCAL_RANK mod the visible GPUs> when CUDA is
    available, else cpu. Never silently cuda:0 for every rank."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    gpu = os.environ.get("PSRT_GPU", "")
    if gpu:
        i = int(gpu)
        if not 0 <= i < count:
            raise psrt.Error(f"PSRT_GPU={gpu}, but this process sees {count} GPU(s) "
                             "(CUDA_VISIBLE_DEVICES?)")
        return torch.device("cuda", i)
    local = os.environ.get("PSRT_LOCAL_RANK", "")
    if local:
        return torch.device("cuda", int(local) % count)
    return torch.device("cuda", 0)


class DistributedOptimizer:
    """Trains with `optimizer` through the job's parameter servers (see the module's help).

    named_parameters: model.named_parameters() (the keys are the names; without it the
    parameters are named by their position in the optimizer). worker: a psrt.Worker (default
    psrt.default_worker(), shut down by close(); a script that just ends leaves the job too).
    grad_dtype: torch.float32, or torch.float16 / torch.bfloat16 to halve the bytes pushed (the
    servers accumulate in fp32). mode: "auto", "server" or "sum" (module help).
    backward_passes_per_step: backward passes accumulated locally per push (Horovod's).
    max_grad_norm: clip the averaged gradients to this norm with
    torch.nn.utils.clip_grad_norm_ over every trained parameter before each step (sum mode;
    default: psrun's --max-grad-norm).

    Blocking: the constructor (joins, broadcasts rank 0's parameters), synchronize(), step()
    (sum mode: waits for the averaged gradients; server mode: when the last forward did not
    wait for every parameter). Errors raise psrt.Error from step(), synchronize(), backward()
    or the forward that waits.
    """

    def __init__(self, optimizer, named_parameters=None, worker=None,
                 grad_dtype=torch.float32, mode="auto", backward_passes_per_step=1,
                 max_grad_norm=None):
        if mode not in MODES:
            raise ValueError(f"psrt.torch.DistributedOptimizer(mode={mode!r}): use one of {MODES}")
        if grad_dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"grad_dtype {grad_dtype}: use torch.float32, torch.float16 or "
                             "torch.bfloat16")
        if not (isinstance(backward_passes_per_step, int) and backward_passes_per_step >= 1):
            raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r}: an int >= 1")
        if max_grad_norm is None:
            max_grad_norm = _env_max_grad_norm()
        elif not (float(max_grad_norm) >= 0.0 and float(max_grad_norm) != float("inf")):
            raise ValueError(f"max_grad_norm={max_grad_norm!r}: a finite number >= 0")
        self.max_grad_norm = float(max_grad_norm)
        sgd = None
        if mode == "server" and self.max_grad_norm > 0:
            raise ValueError(
                f"psrt.torch.DistributedOptimizer: max_grad_norm {self.max_grad_norm} (or psrun "
                "--max-grad-norm) clips with torch's norm over the whole model, which needs the "
                "averaged gradients on the worker: use mode='sum' (or 'auto')")
        if mode != "sum" and self.max_grad_norm == 0:
            try:
                sgd = _check_optimizer(optimizer)
            except (TypeError, ValueError):
                if mode == "server":
                    raise
        self.mode = "server" if sgd is not None else "sum"
        self._server_optimizer = sgd  # set_optimizer's arguments (server mode)
        self.optimizer = optimizer
        self._grad_dtype = grad_dtype
        self._passes_per_step = backward_passes_per_step
        self._owns_worker = worker is None
        self.worker = psrt.default_worker() if worker is None else worker
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
        self._steps = 0
        self._no_sync = False
        self._skip_sync = False
        self._synced = False  # sum mode: .grad holds this step's averaged gradients
        if self.mode == "server":
            self._lr = float(sgd["lr"])  # the rate the worker stamps on its pushes now
            self._join(sgd)
        else:
            self._join_sum()
        self._hooks = [s.param.register_hook(self._make_hook(s))
                       for s in self._slots if s.trained]
        self._pre_hook = None
        if self.mode == "server":
            self._pre_hook = torch.nn.modules.module.register_module_forward_pre_hook(
                self._pre_forward)
        self._open = True

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

    def _broadcast_initial(self):
        """Rank 0's values become every worker's (a resumed job: the checkpoint's)."""
        w = self.worker
        # A worker that joined a running job finds the weights stored and the others training:
        # no barrier (it would wait for them forever); its pulls take the current round's.
        if w.rank == 0 and not w.joined:
            for s in self._slots:
                w.init(s.key, s.data if s.data.device.type == "cpu" else s.data.cpu())
        if not w.joined:
            w.barrier()
        pulls = [w.pull(s.key, s.data) for s in self._slots]
        for h in pulls:
            h.wait()

    def _join(self, sgd):
        w = self.worker
        w.set_optimizer(**sgd)
        self._broadcast_initial()
        w.set_learning_rate(0.0)  # the configured rate, until param_groups' lr changes

    def _join_sum(self):
        self._broadcast_initial()
        for s in self._slots:
            if s.trained:
                s.avg = torch.zeros_like(s.data)
                # Every worker inits (the first stores it); each init returns once stored, so
                # this worker's first push finds the key.
                host = s.avg if s.avg.device.type == "cpu" else s.avg.cpu()
                self.worker.init(s.grad_key, host, update="mean")

    # --- hooks ---

    def _make_hook(self, slot):
        def hook(grad):
            self._on_grad(slot, grad)
        return hook

    def _on_grad(self, s, grad):
        if s.pushed:
            raise _error(
                psrt.ErrorCode.INVALID_ARGUMENT,
                f"parameter '{s.name}' received a gradient after this step's was pushed: call "
                "step() after the step's last backward (to accumulate several backward passes "
                "into one step, pass backward_passes_per_step or use `with opt.no_sync():`)")
        s.passes += 1
        self._synced = False
        if self._no_sync or s.passes < self._passes_per_step:
            return  # accumulates locally: autograd adds it into .grad
        # The gradient of this step: this pass's plus what earlier passes left in .grad (the hook
        # runs before autograd accumulates). Always a new tensor: the script may change .grad
        # at once, and the push reads this copy until it is sent.
        # (.grad left from before without zero_grad() counts, as torch.optim would see it.)
        prev = s.param.grad
        if prev is None:
            g = grad.detach().to(self._grad_dtype, copy=True,
                                 memory_format=torch.contiguous_format)
        else:
            g = (prev.detach() + grad.detach()).to(self._grad_dtype).contiguous()
        self._push(s, g)

    def _push(self, s, g):
        s.pushed = True
        s.passes = 0
        if self.mode == "sum":
            s.pull = self.worker.push_pull(s.grad_key, g, s.avg)
            return
        self._stamp_lr()
        if self._grad_dtype == torch.float32:
            s.pull = self.worker.push_pull(s.key, g, s.data)
        else:
            self.worker.push(s.key, g)
            s.pull = self.worker.pull(s.key, s.data)

    def _push_remaining(self):
        """Every trained parameter takes part in every round: what is accumulated in .grad, or a
        zero gradient for one backward did not reach."""
        for s in self._slots:
            if s.trained and not s.pushed:
                prev = s.param.grad
                if s.passes > 0 and prev is not None:
                    g = prev.detach().to(self._grad_dtype, copy=True,
                                         memory_format=torch.contiguous_format)
                else:
                    g = torch.zeros_like(s.data, dtype=self._grad_dtype)
                self._push(s, g)

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

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        """Clears the local .grad tensors (what was pushed is a copy, held by the pushes)."""
        for s in self._slots:
            if s.param.grad is not None:
                if set_to_none:
                    s.param.grad = None
                else:
                    s.param.grad.detach_().zero_()

    def synchronize(self):
        """Server mode: waits for every outstanding pull (the model then holds the servers'
        weights). Sum mode: pushes what is not pushed yet and waits for the averaged
        gradients, which then are every trained parameter's .grad (the same bits on every
        worker), ready to clip, unscale or inspect before step()."""
        if self.mode == "sum":
            if self._synced:
                return
            self._push_remaining()
        for s in self._slots:
            if s.pull is not None:
                h, s.pull = s.pull, None
                h.wait()
        if self.mode == "sum":
            for s in self._slots:
                if s.trained:
                    s.pushed = False
                    if s.param.grad is None:
                        s.param.grad = s.avg.clone()
                    else:
                        s.param.grad.detach().copy_(s.avg)
            self._synced = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's: step() inside does not synchronize (call synchronize() first, then touch
        the averaged gradients). Sum mode only: in server mode the servers updated the weights
        with the gradients as backward computed them, so an edit after synchronize() would be
        lost; that is refused."""
        if self.mode != "sum":
            raise _error(psrt.ErrorCode.INVALID_ARGUMENT,
                         "skip_synchronize(): the servers run the optimizer (mode 'server'), so "
                         "gradients edited after synchronize() never reach the update: construct "
                         "the DistributedOptimizer with mode='sum'")
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's: backward passes inside only accumulate into .grad locally; the first backward
        outside (or step()) pushes the accumulated sum."""
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    def step(self, closure=None):
        """Ends the step. Sum mode: synchronize() unless done (inside skip_synchronize() it must
        have been), clip to max_grad_norm when set, then the local optimizer's step(closure).
        Server mode: pushes what was not pushed (every key takes part in every round) and
        returns; the pulls complete in the background (it waits for every one when the last
        forward did not wait for every one)."""
        if self.mode == "sum":
            return self._step_sum(closure)
        if closure is not None:
            raise ValueError("DistributedOptimizer.step(closure): closures need mode='sum'")
        self._push_remaining()
        gated = True
        for s in self._slots:
            s.pushed = False
            s.passes = 0
            gated = gated and (s.gated or not s.trained)
            s.gated = False
        self._steps += 1
        # torch.optim.lr_scheduler counts optimizer steps to warn about a scheduler stepped
        # first; the servers did the wrapped optimizer's step.
        if hasattr(self.optimizer, "_step_count"):
            self.optimizer._step_count += 1
        if not gated:
            self.synchronize()
        return None

    def _step_sum(self, closure):
        if not self._synced:
            if self._skip_sync and any(s.pushed for s in self._slots):
                raise _error(psrt.ErrorCode.INVALID_ARGUMENT,
                             "step() inside skip_synchronize() before synchronize(): .grad "
                             "still holds this worker's own gradients; call opt.synchronize() "
                             "first")
            self.synchronize()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([s.param for s in self._slots if s.trained],
                                           self.max_grad_norm)
        self._synced = False
        self._steps += 1
        return self.optimizer.step(closure)

    @property
    def steps(self):
        return self._steps

    @property
    def parameter_names(self):
        return [s.name for s in self._slots]

    def state_dict(self):
        """The optimizer's state in torch's format (the wrapped optimizer's state_dict()), for
        torch.save. Sum mode: the local optimizer's. Server mode: synchronize(), then the
        servers' state of every trained parameter (SGD: momentum_buffer; Adam/AdamW: step,
        exp_avg, exp_avg_sq) is fetched into self.optimizer.state first, so that the dict holds
        what the servers run with: the same optimizer in one process, or load_state_dict() in a
        job of any number of workers and servers, resumes from it. Call it between steps on any
        worker (a sync job; the weights to save with it are the model's after synchronize())."""
        if self.mode == "server":
            self._fetch_state()
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        """Loads a state_dict() (or torch's optimizer's). Sum mode: into the local optimizer.
        Server mode: into self.optimizer (its hyper-parameters must be the ones the servers run,
        except lr, which the next push carries), then onto the servers: every worker calls it
        at the same point (after construction, before training on; it synchronizes and holds
        two barriers), and rank 0 stores each parameter's state. A parameter without state in
        the dict keeps the servers' (none in a fresh job)."""
        if self.mode == "sum":
            return self.optimizer.load_state_dict(state_dict)
        self.synchronize()
        self.optimizer.load_state_dict(state_dict)
        loaded = _check_optimizer(self.optimizer)
        fixed = {k: v for k, v in loaded.items() if k != "lr"}
        running = {k: v for k, v in self._server_optimizer.items() if k != "lr"}
        if fixed != running:
            raise ValueError(
                "DistributedOptimizer.load_state_dict: the state's hyper-parameters "
                f"{fixed} are not those the servers run, {running}: build the optimizer with "
                "the saved ones before wrapping it")
        # Where the servers cannot take a state (cuda servers, --replicas 2) every worker
        # raises here, rather than rank 0 alone below while the others wait in the barrier.
        smallest = min((s for s in self._slots if s.trained), key=lambda s: s.data.numel())
        self.worker.optimizer_state(smallest.key)
        self.worker.barrier()  # every worker's last round is applied: none is queued
        if self.worker.rank == 0:
            for s in self._slots:
                if s.trained:
                    self._store_state(s)
        self.worker.barrier()  # no worker pushes before the state is stored
        return None

    def _adam(self):
        return self._server_optimizer.get("optimizer") in ("adam", "adamw")

    def _fetch_state(self):
        self.synchronize()
        for s in self._slots:
            if not s.trained:
                continue
            got = self.worker.optimizer_state(s.key)
            if got["momentum"] is None:
                self.optimizer.state.pop(s.param, None)
                continue
            state = self.optimizer.state[s.param]
            state.clear()
            if self._adam():
                state["step"] = torch.tensor(float(got["steps"]))
                state["exp_avg"] = _from_bytes(got["momentum"], s.param)
                state["exp_avg_sq"] = _from_bytes(got["exp_avg_sq"], s.param)
            else:
                state["momentum_buffer"] = _from_bytes(got["momentum"], s.param)

    def _store_state(self, s):
        state = self.optimizer.state.get(s.param)
        if not state:
            return
        if self._adam():
            if "exp_avg" not in state or "exp_avg_sq" not in state:
                raise ValueError(f"load_state_dict: the state of parameter '{s.name}' has no "
                                 "exp_avg/exp_avg_sq: it was not saved by Adam or AdamW")
            self.worker.set_optimizer_state(s.key, momentum=_host(state["exp_avg"]),
                                            exp_avg_sq=_host(state["exp_avg_sq"]),
                                            steps=int(state.get("step", 0)))
        elif state.get("momentum_buffer") is not None:
            self.worker.set_optimizer_state(s.key, momentum=_host(state["momentum_buffer"]))

    def close(self):
        """Removes the hooks, waits for every outstanding operation and, when the optimizer
        made its worker, shuts it down. Idempotent. Not needed at the end of a script: a
        process that ends normally leaves the job."""
        if not self._open:
            return
        self._open = False
        if self._pre_hook is not None:
            self._pre_hook.remove()
            self._pre_hook = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        try:
            for s in self._slots:
                if s.pull is not None:
                    h, s.pull = s.pull, None
                    h.wait()
        finally:
            if self._owns_worker:
                self.worker.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
