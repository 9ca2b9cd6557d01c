"""psrt.allreduce and psrt.broadcast: small collectives through the servers, for metrics,
logging and early stopping (not for gradients: psrt.torch pushes those itself).

Every worker calls them in the same order with tensors of the same size (as with Horovod or
torch.distributed); each call is one round of an aggregate-only key (psrt/key_update.h), so
they need psrun --mode sync and cpu servers. Values travel as float32: integers up to 2^24 and
their sums are exact. Blocking; each returns a new tensor of the input's dtype and device and
leaves the input as it was.

    loss = psrt.allreduce(torch.tensor([loss_sum, count]), op="sum")
    stop = psrt.broadcast(torch.tensor([early_stop]), root=0)
"""

import torch

from psrt._core import Worker, key_of

__all__ = ["allreduce", "broadcast", "default_worker"]

_OPS = ("sum", "mean")
_default = None
_ready = {}  # (id(worker), key) -> elements: keys this process has initialised


def default_worker():
    """The process's worker: joined from the environment (psrt.Worker.from_env()) on first use,
    shared by psrt.allreduce, psrt.broadcast and psrt.torch.DistributedOptimizer(worker=None)."""
    global _default
    if _default is None:
        _default = Worker.from_env()
    return _default


def _round(values, op, name, worker):
    """One round of the aggregate-only key of (op, name or size): the op over every worker's
    `values` (a float32 CPU tensor)."""
    w = default_worker() if worker is None else worker
    n = values.numel()
    key = key_of(f"psrt.{op}/" + (name if name is not None else f"#{n}"))
    known = _ready.get((id(w), key))
    if known is None:
        w.init(key, torch.zeros(n), update=op)
        _ready[(id(w), key)] = n
    elif known != n:
        raise ValueError(f"psrt collective '{name}': {n} elements, but earlier calls had {known}")
    out = torch.empty(n)
    w.push_pull(key, values, out).wait()
    return out


def _as_tensor(x):
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t, t.detach().to("cpu", torch.float32).contiguous().clone().reshape(-1)


def allreduce(tensor, op="mean", name=None, worker=None):
    """The sum or mean over every worker of `tensor` (a torch.Tensor or a number), returned as a
    new tensor shaped and typed like it. name: calls with the same name share a key (default:
    one key per size)."""
    if op not in _OPS:
        raise ValueError(f"psrt.allreduce(op={op!r}): use 'sum' or 'mean'")
    t, values = _as_tensor(tensor)
    out = _round(values, op, name, worker)
    return out.reshape(t.shape).to(t.device, t.dtype)


def broadcast(tensor, root=0, name=None, worker=None):
    """Worker `root`'s `tensor`, on every worker, as a new tensor shaped and typed like it
    (a sum in which only `root` contributes: exact)."""
    w = default_worker() if worker is None else worker
    if not 0 <= root < w.num_workers:
        raise ValueError(f"psrt.broadcast(root={root}): the job has {w.num_workers} workers")
    t, values = _as_tensor(tensor)
    if w.rank != root:
        values.zero_()
    out = _round(values, "sum", "broadcast/" + (name if name is not None else ""), w)
    return out.reshape(t.shape).to(t.device, t.dtype)
