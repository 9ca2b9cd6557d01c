"""The worker program of the psrt.torch tests, run under psrun. Prints "PASS <scenario> rank <r>"
on success and exits 1 with a message otherwise.

    torch_worker.py equiv   1 worker: DistributedOptimizer(SGD momentum, Nesterov, weight decay,
                            cosine schedule) against plain torch.optim.SGD, step by step;
                            then a second backward after the step's push is refused
    torch_worker.py sync [fp32|bf16]
                            2 workers, sync: every worker starts from rank 0's values and holds
                            the same weights every step; frozen parameters are broadcast and
                            never trained; a parameter backward does not reach stays put;
                            tied parameters are one key; BatchNorm statistics stay local
    torch_worker.py adamw   N workers, sync: DistributedOptimizer(AdamW, weight decay, a
                            per-step lr schedule) on each worker's share of a global batch
                            against one torch.optim.AdamW on the whole batch, 20 steps:
                            every parameter within 1e-5 relative (L2 norm of the difference)
"""

import copy
import hashlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch
from worker_checks import expect, fail

STEPS = 30


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 8 * 8, 16)
        self.fc2 = nn.Linear(16, 10)
        if unused:  # never called: backward does not reach it
            self.unused = nn.Linear(3, 3)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batch(step, rank=0):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 1, 12, 12, generator=g), torch.randint(0, 10, (16,), generator=g)


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                           weight_decay=1e-3)


def equiv(w):
    torch.manual_seed(0)
    local = Net()
    model = copy.deepcopy(local)
    ref_opt = sgd(local)
    ref_sched = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=STEPS)
    opt = psrt.torch.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                          worker=w)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt.optimizer, T_max=STEPS)
    for step in range(STEPS):
        x, y = batch(step)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(local(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_sched.step()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        a, b = loss.item(), ref_loss.item()
        # As the C++ test holds pstrain: last-bit differences only.
        expect(abs(a - b) <= 2e-6 * abs(b), f"step {step + 1}: loss {a!r} vs torch {b!r}")
    opt.synchronize()
    expect(opt.steps == STEPS, f"steps {opt.steps}")
    ref = dict(local.named_parameters())
    for name, p in model.named_parameters():
        q = ref[name]
        expect(torch.allclose(p, q, rtol=1e-4, atol=1e-6),
               f"{name}: max difference {(p - q).abs().max().item()}")
    # BatchNorm statistics are local: the same data gives the same running means.
    expect(torch.allclose(model.bn.running_mean, local.bn.running_mean), "BatchNorm running mean")

    # Two backward passes before one step, without backward_passes_per_step or no_sync():
    # refused, naming the parameter and the ways to accumulate.
    x, y = batch(0)
    F.cross_entropy(model(x), y).backward()
    try:
        F.cross_entropy(model(x), y).backward()
        fail("a second backward before step() was accepted")
    except psrt.Error as e:
        expect(e.code == psrt.ErrorCode.INVALID_ARGUMENT, f"code {e.code}")
        expect("received a gradient after this step's was pushed" in str(e), str(e))
        expect("backward_passes_per_step" in str(e), str(e))
    opt.step()
    opt.close()
    print(f"PASS equiv rank {w.rank}", flush=True)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net(unused=True)
        self.frozen = nn.Linear(10, 10)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(10, 10, bias=False)
        self.tail = self.head  # one tensor under two module names

    def forward(self, x):
        return self.tail(self.frozen(self.head(self.net(x))))


def digest(model):
    h = hashlib.sha256()
    for _, p in model.named_parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def sync(w, dtype="fp32"):
    torch.manual_seed(w.rank)  # different values on each worker until rank 0's are broadcast
    model = Tied()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = psrt.torch.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
        named_parameters=model.named_parameters(), worker=w,
        grad_dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    names = opt.parameter_names
    expect("tail.weight" not in names and "head.weight" in names, f"names {names}")
    print(f"initial {digest(model)} rank {w.rank}", flush=True)
    frozen = model.frozen.weight.detach().clone()
    unused = model.net.unused.weight.detach().clone()
    for step in range(10):
        x, y = batch(step, w.rank)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.synchronize()
        print(f"step {step} {digest(model)} rank {w.rank}", flush=True)
    expect(torch.equal(model.frozen.weight, frozen), "a frozen parameter changed")
    expect(torch.equal(model.net.unused.weight, unused), "an unreached parameter changed")
    if w.rank == 0:
        expect(torch.equal(model.frozen.weight, before["frozen.weight"]),
               "rank 0's frozen parameter is not its own")
    opt.close()
    print(f"PASS sync rank {w.rank}", flush=True)


class Plain(nn.Module):
    """Net without BatchNorm: a shard's gradient then averages to the global batch's exactly."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.fc1 = nn.Linear(4 * 8 * 8, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv(x))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def adamw(w):
    steps, n, per = 20, w.num_workers, 16
    torch.manual_seed(0)
    local = Plain()
    model = copy.deepcopy(local)
    initial = {k: v.detach().clone() for k, v in local.named_parameters()}

    def make(m):
        return torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=0.05)
    ref_opt = make(local)
    ref_sched = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=steps)
    opt = psrt.torch.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                          worker=w)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt.optimizer, T_max=steps)
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(n * per, 1, 12, 12, generator=g), torch.randint(0, 10, (n * per,),
                                                                          generator=g)
        ref_opt.zero_grad()
        F.cross_entropy(local(x), y).backward()  # the global batch, in one process
        ref_opt.step()
        ref_sched.step()
        mine = slice(w.rank * per, (w.rank + 1) * per)
        opt.zero_grad()
        F.cross_entropy(model(x[mine]), y[mine]).backward()  # this worker's share
        opt.step()
        sched.step()
    opt.synchronize()
    ref = dict(local.named_parameters())
    for name, p in model.named_parameters():
        q = ref[name]
        rel = ((p - q).norm() / q.norm()).item()
        expect(rel <= 1e-5, f"{name}: relative difference {rel} after {steps} steps")
        moved = ((q - initial[name]).norm() / q.norm()).item()
        expect(moved > 1e-3, f"{name}: moved only {moved} relative: the test proves nothing")
    opt.close()
    print(f"PASS adamw rank {w.rank}", flush=True)


def main():
    w = psrt.Worker.from_env()
    {"equiv": equiv, "sync": sync, "adamw": adamw}[sys.argv[1]](w, *sys.argv[2:])
    w.shutdown()


if __name__ == "__main__":
    main()
