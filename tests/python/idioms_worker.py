"""The worker program of the PyTorch-idiom tests (test_idioms.py), run under psrun. Each worker
trains its shard of a global batch through psrt.torch and, on the side, the same model as one
process on the whole global batch with plain torch; after STEPS steps the weights must agree to
a relative 1e-5. Prints "PASS <scenario> rank <r>" on success, exits 1 with a message otherwise.

    idioms_worker.py clip       sum mode, RAdam: synchronize(), clip_grad_norm_ (torch's norm over
                                the whole model), `with opt.skip_synchronize(): opt.step()`
    idioms_worker.py scale      sum mode, NAdam: GradScaler's in-place pattern by hand (backward
                                of loss * 1024, .grad /= 1024 after synchronize(), skip a step
                                whose gradients are not finite: rank 1's backward overflows at step 5,
                                so every worker skips it as the one process does)
    idioms_worker.py accum      SGD momentum, 2 micro-batches per step: backward_passes_per_step=2
                                on model A, `with opt.no_sync():` on model B (both modes)
    idioms_worker.py psrun_clip psrun --max-grad-norm: mode "auto" picks sum mode and clips
    idioms_worker.py touch      server mode: .grad scaled and zeroed in place at once after every
                                backward; the weights equal those of an untouched twin, bit for bit
    idioms_worker.py collectives  psrt.allreduce (sum, mean) and psrt.broadcast, exact, in a job
                                whose model trains on the servers
    idioms_worker.py noclose    trains 3 steps and ends without close() or shutdown()
    idioms_worker.py env        torchrun's variables and psrt.Worker.local_rank, as psrun's
                                local launcher sets them (one host: local rank = rank), and
                                psrun --env PSRT_TEST_FOO=a=b
"""

import copy
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch
from worker_checks import expect, fail

STEPS = 20
GLOBAL = 16  # samples per step, split over the workers


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.fc1 = nn.Linear(4 * 8 * 8, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(F.relu(self.conv(x)).flatten(1))))


def global_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(GLOBAL, 1, 12, 12, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g)


def shard(x, w):
    n = GLOBAL // w.num_workers
    return x[w.rank * n:(w.rank + 1) * n]


def close_to(model, ref, what, rtol=1e-5):
    refp = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        q = refp[name].detach()
        err = ((p.detach() - q).norm() / q.norm()).item()
        expect(err <= rtol, f"{what}: {name} differs from one process by {err:.3g} (relative)")


def twins(seed=0):
    torch.manual_seed(seed)
    model = Net()
    return model, copy.deepcopy(model)


def clip(w):
    model, ref = twins()
    opt = psrt.torch.DistributedOptimizer(torch.optim.RAdam(model.parameters(), lr=1e-2),
                                          named_parameters=model.named_parameters(), worker=w,
                                          mode="sum")
    expect(opt.mode == "sum", f"mode {opt.mode}")
    ref_opt = torch.optim.RAdam(ref.parameters(), lr=1e-2)
    clipped = 0
    for step in range(STEPS):
        x, y = global_batch(step)
        opt.zero_grad()
        F.cross_entropy(model(shard(x, w)), shard(y, w)).backward()
        opt.synchronize()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with opt.skip_synchronize():
            opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
        expect(abs(norm.item() - ref_norm.item()) <= 1e-5 * ref_norm.item(),
               f"step {step}: norm {norm.item()} vs one process {ref_norm.item()}")
        clipped += ref_norm.item() > 0.5
    expect(clipped >= STEPS // 2, f"only {clipped} steps were clipped: the test checks nothing")
    close_to(model, ref, "clip")
    print(f"PASS clip rank {w.rank}", flush=True)


def scale(w):
    model, ref = twins()
    opt = psrt.torch.DistributedOptimizer(torch.optim.NAdam(model.parameters(), lr=1e-2),
                                          named_parameters=model.named_parameters(), worker=w)
    expect(opt.mode == "sum", f"NAdam: mode {opt.mode}, not sum")
    ref_opt = torch.optim.NAdam(ref.parameters(), lr=1e-2)
    S = 1024.0
    skipped = 0
    for step in range(STEPS):
        x, y = global_batch(step)
        opt.zero_grad()
        # Step 5: one worker's backward overflows (its gradients are infinite or NaN).
        overflow = math.inf if step == 5 and w.rank == 1 else 1.0
        (F.cross_entropy(model(shard(x, w)), shard(y, w)) * S * overflow).backward()
        opt.synchronize()
        finite = True
        for p in model.parameters():
            p.grad /= S  # GradScaler.unscale_, in place
            finite = finite and bool(torch.isfinite(p.grad).all())
        if finite:
            with opt.skip_synchronize():
                opt.step()
        else:
            skipped += 1
        ref_opt.zero_grad()
        (F.cross_entropy(ref(x), y) * S).backward()
        if step == 5:
            ref.fc1.weight.grad[0, 0] = math.inf
        for p in ref.parameters():
            p.grad /= S
        if all(bool(torch.isfinite(p.grad).all()) for p in ref.parameters()):
            ref_opt.step()
    expect(skipped == 1, f"skipped {skipped} steps, not 1 (step 5)")
    close_to(model, ref, "scale")
    print(f"PASS scale rank {w.rank}", flush=True)


def accumulate(w, model, opt, ref, ref_opt, use_no_sync):
    for step in range(STEPS):
        x, y = global_batch(step)
        xs, ys = shard(x, w), shard(y, w)
        half = xs.shape[0] // 2
        opt.zero_grad()
        if use_no_sync:
            with opt.no_sync():
                (F.cross_entropy(model(xs[:half]), ys[:half]) / 2).backward()
        else:
            (F.cross_entropy(model(xs[:half]), ys[:half]) / 2).backward()
        (F.cross_entropy(model(xs[half:]), ys[half:]) / 2).backward()
        opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    opt.synchronize()


def accum(w):
    for mode in ("server", "sum"):
        for use_no_sync in (False, True):
            model, ref = twins()
            what = f"accum {mode} {'no_sync' if use_no_sync else 'backward_passes_per_step'}"
            sgd = dict(lr=0.05, momentum=0.9)
            prefix = f"{mode}{int(use_no_sync)}."
            opt = psrt.torch.DistributedOptimizer(
                torch.optim.SGD(model.parameters(), **sgd),
                named_parameters=[(prefix + n, p) for n, p in model.named_parameters()],
                worker=w, mode=mode, backward_passes_per_step=1 if use_no_sync else 2)
            accumulate(w, model, opt, ref, torch.optim.SGD(ref.parameters(), **sgd), use_no_sync)
            opt.close()
            close_to(model, ref, what)
    print(f"PASS accum rank {w.rank}", flush=True)


def psrun_clip(w):
    model, ref = twins()
    opt = psrt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters(), worker=w)
    expect(opt.mode == "sum" and opt.max_grad_norm == 0.5,
           f"psrun --max-grad-norm 0.5: mode {opt.mode}, max_grad_norm {opt.max_grad_norm}")
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = global_batch(step)
        opt.zero_grad()
        F.cross_entropy(model(shard(x, w)), shard(y, w)).backward()
        opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
    close_to(model, ref, "psrun_clip")
    print(f"PASS psrun_clip rank {w.rank}", flush=True)


class Wide(nn.Module):
    """A 16 MB first layer: its gradient comes last in backward and takes a while to send."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4096, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def touch(w):
    torch.manual_seed(0)
    a = Wide()
    b = copy.deepcopy(a)
    sgd = dict(lr=0.05, momentum=0.9)
    opt_a = psrt.torch.DistributedOptimizer(
        torch.optim.SGD(a.parameters(), **sgd), worker=w, mode="server",
        named_parameters=[("a." + n, p) for n, p in a.named_parameters()])
    opt_b = psrt.torch.DistributedOptimizer(
        torch.optim.SGD(b.parameters(), **sgd), worker=w, mode="server",
        named_parameters=[("b." + n, p) for n, p in b.named_parameters()])
    for step in range(5):
        g = torch.Generator().manual_seed(100 * w.rank + step)
        x, y = torch.randn(8, 4096, generator=g), torch.randint(0, 10, (8,), generator=g)
        for model, opt, edit in ((a, opt_a, False), (b, opt_b, True)):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if edit:  # at once: the pushes of fc1 are still under way
                b.fc1.weight.grad.mul_(1000.0)
                b.fc1.weight.grad.zero_()
                b.fc2.weight.grad.fill_(math.nan)
            opt.step()
    opt_a.synchronize()
    opt_b.synchronize()
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        expect(torch.equal(p, q), f"{name}: editing .grad after backward changed the weights "
                                  f"(max difference {(p - q).abs().max().item()})")
    print(f"PASS touch rank {w.rank}", flush=True)


def collectives(w):
    torch.manual_seed(0)
    model = Net()
    opt = psrt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters(), worker=w)
    expect(opt.mode == "server", f"mode {opt.mode}")
    n = w.num_workers
    for step in range(3):
        x, y = global_batch(step)
        opt.zero_grad()
        loss = F.cross_entropy(model(shard(x, w)), shard(y, w))
        loss.backward()
        opt.step()
        mine = torch.arange(5, dtype=torch.int64) * (w.rank + 1) + step
        total = psrt.allreduce(mine, op="sum", worker=w)
        want = sum(torch.arange(5) * (r + 1) + step for r in range(n))
        expect(total.dtype == torch.int64 and torch.equal(total, want), f"sum {total} != {want}")
        mean = psrt.allreduce(torch.tensor([float(w.rank)] * 3), op="mean", name="rank",
                              worker=w)
        expect(torch.equal(mean, torch.full((3,), (n - 1) / 2)), f"mean {mean}")
        got = psrt.broadcast(torch.tensor([[w.rank + 0.25, step]]), root=n - 1, worker=w)
        expect(torch.equal(got, torch.tensor([[n - 1 + 0.25, step]])), f"broadcast {got}")
        avg_loss = psrt.allreduce(loss.detach(), worker=w)
        expect(avg_loss.shape == loss.shape and torch.isfinite(avg_loss), f"loss {avg_loss}")
    try:
        psrt.allreduce(torch.zeros(4), op="max", worker=w)
        fail("op max accepted")
    except ValueError as e:
        expect("'sum' or 'mean'" in str(e), str(e))
    opt.close()
    print(f"PASS collectives rank {w.rank}", flush=True)


def noclose(w):
    model, _ = twins()
    opt = psrt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters())
    for step in range(3):
        x, y = global_batch(step)
        opt.zero_grad()
        F.cross_entropy(model(shard(x, w)), shard(y, w)).backward()
        opt.step()
    print(f"PASS noclose rank {opt.worker.rank}", flush=True)
    # no opt.close(), no shutdown(): the script just ends


def env(w):
    import os
    e = os.environ
    got = {k: e.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                 "PSRT_LOCAL_RANK", "PSRT_LOCAL_SIZE")}
    n = str(w.num_workers)
    want = {"RANK": str(w.rank), "WORLD_SIZE": n, "LOCAL_RANK": str(w.rank),
            "LOCAL_WORLD_SIZE": n, "PSRT_LOCAL_RANK": str(w.rank), "PSRT_LOCAL_SIZE": n}
    expect(got == want, f"environment {got}, wanted {want}")
    expect(w.local_rank == w.rank, f"local_rank {w.local_rank}")
    expect(e.get("PSRT_TEST_FOO") == "a=b", f"--env PSRT_TEST_FOO=a=b: {e.get('PSRT_TEST_FOO')}")
    print(f"PASS env rank {w.rank}", flush=True)


def main():
    scenario = sys.argv[1]
    if scenario == "noclose":
        return noclose(psrt.default_worker())
    w = psrt.Worker.from_env()
    {"clip": clip, "scale": scale, "accum": accum, "psrun_clip": psrun_clip, "touch": touch,
     "collectives": collectives, "env": env}[scenario](w)
    w.shutdown()


if __name__ == "__main__":
    main()
