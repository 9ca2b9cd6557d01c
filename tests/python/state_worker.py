"""The worker program of the optimizer-state tests (test_torch.py), run under psrun: AdamW on the
servers (server mode), each worker on its share of a global batch. Prints "PASS <scenario> rank
<r>" on success, exits 1 with a message otherwise.

    state_worker.py save DIR    trains SAVE_AT steps, saves {"model", "optim": opt.state_dict()}
                                to DIR/mid.pt (rank 0), checks that the state holds the servers'
                                moments (those of one torch.optim.AdamW on the global batch,
                                1e-5 / 1e-4 relative, step == SAVE_AT), trains on to STEPS and saves the
                                weights to DIR/uninterrupted.pt
    state_worker.py resume DIR [exact]
                                a fresh job: loads DIR/mid.pt (model.load_state_dict,
                                opt.load_state_dict), trains SAVE_AT..STEPS; the weights equal
                                the uninterrupted run's (`exact`: same workers and servers, to
                                a relative 1e-6) and those of one torch.optim.AdamW that loaded
                                the same dict and trained on (1e-5)
    state_worker.py checkpoint  rank 0 asks for round 3 with psrt.request_checkpoint(3) before
                                its first push; 5 steps (psrun --checkpoint-dir)
    state_worker.py resumed     a job resumed from that directory: resume_round == 3 and the
                                weights are the round-3 weights rank 0 printed
"""

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch
from worker_checks import expect

STEPS, SAVE_AT, GLOBAL = 12, 5, 16


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.fc1 = nn.Linear(4 * 8 * 8, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(F.relu(self.conv(x)).flatten(1))))


def make(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.05)


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(GLOBAL, 1, 12, 12, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g)


def train(w, model, opt, steps):
    n = GLOBAL // w.num_workers
    mine = slice(w.rank * n, (w.rank + 1) * n)
    for step in steps:
        x, y = batch(step)
        opt.zero_grad()
        F.cross_entropy(model(x[mine]), y[mine]).backward()
        opt.step()


def one_process(steps, model=None, opt=None):
    """One torch.optim.AdamW on the global batch (from seed 0's model unless given)."""
    if model is None:
        torch.manual_seed(0)
        model = Net()
        opt = make(model)
    for step in steps:
        x, y = batch(step)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def close(model, ref, rtol, what):
    want = dict(ref.named_parameters()) if isinstance(ref, nn.Module) else ref
    for name, p in model.named_parameters():
        err = rel(p.detach(), want[name].detach())
        expect(err <= rtol, f"{what}: {name} differs by {err:.3g} (relative; at most {rtol})")


def save(w, out):
    torch.manual_seed(0)
    model = Net()
    opt = psrt.torch.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                          worker=w)
    expect(opt.mode == "server", f"mode {opt.mode}: AdamW should run on the servers")
    train(w, model, opt, range(SAVE_AT))
    sd = opt.state_dict()  # synchronizes: the model holds the servers' weights
    names = [n for n, _ in model.named_parameters()]
    expect(sorted(sd["state"]) == list(range(len(names))),
           f"state for parameters {sorted(sd['state'])}, want every one of {len(names)}")
    ref, ref_opt = one_process(range(SAVE_AT))
    ref_state = ref_opt.state_dict()["state"]
    for i, name in enumerate(names):
        st = sd["state"][i]
        expect(int(st["step"]) == SAVE_AT, f"{name}: step {st['step']}, want {SAVE_AT}")
        # The mean of the workers' gradients rounds otherwise than the global batch's; squared,
        # the difference doubles: exp_avg_sq within 1e-4.
        for k, rtol in (("exp_avg", 1e-5), ("exp_avg_sq", 1e-4)):
            err = rel(st[k], ref_state[i][k])
            expect(err <= rtol, f"{name}: {k} differs from one process's by {err:.3g}")
    close(model, ref, 1e-5, f"weights after {SAVE_AT} steps")
    if w.rank == 0:
        torch.save({"model": model.state_dict(), "optim": sd}, out / "mid.pt")
    train(w, model, opt, range(SAVE_AT, STEPS))
    opt.synchronize()
    if w.rank == 0:
        torch.save(model.state_dict(), out / "uninterrupted.pt")
    opt.close()
    print(f"PASS save rank {w.rank}", flush=True)


def resume(w, out, exact=""):
    saved = torch.load(out / "mid.pt")
    torch.manual_seed(1)  # other initial weights: everything must come from the file
    model = Net()
    model.load_state_dict(saved["model"])
    opt = psrt.torch.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                          worker=w)
    opt.load_state_dict(saved["optim"])
    train(w, model, opt, range(SAVE_AT, STEPS))
    opt.synchronize()
    if exact:
        close(model, torch.load(out / "uninterrupted.pt"), 1e-6, "resumed vs uninterrupted")
    ref = Net()
    ref.load_state_dict(saved["model"])
    ref_opt = make(ref)
    ref_opt.load_state_dict(saved["optim"])  # torch's own AdamW takes psrt's state_dict
    one_process(range(SAVE_AT, STEPS), ref, ref_opt)
    close(model, ref, 1e-5, "resumed vs one torch.optim.AdamW resumed from the same dict")
    opt.close()
    print(f"PASS resume rank {w.rank}", flush=True)


def digest(model):
    return ",".join(f"{p.detach().sum().item():.9g}" for p in model.parameters())


def checkpoint(w):
    if w.rank == 0:
        psrt.request_checkpoint(3, worker=w)
    torch.manual_seed(0)
    model = Net()
    opt = psrt.torch.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                          worker=w)
    for step in range(5):
        train(w, model, opt, [step])
        if step == 2:
            opt.synchronize()
            print(f"round 3 weights {digest(model)} rank {w.rank}", flush=True)
    opt.close()
    print(f"PASS checkpoint rank {w.rank}", flush=True)


def resumed(w):
    expect(w.resume_round == 3, f"resume_round {w.resume_round}, want 3")
    torch.manual_seed(7)
    model = Net()
    opt = psrt.torch.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                          worker=w)
    print(f"resumed weights {digest(model)} rank {w.rank}", flush=True)
    opt.close()
    print(f"PASS resumed rank {w.rank}", flush=True)


def main():
    w = psrt.Worker.from_env()
    what, args = sys.argv[1], sys.argv[2:]
    if what in ("save", "resume"):
        {"save": save, "resume": resume}[what](w, Path(args[0]), *args[1:])
    else:
        {"checkpoint": checkpoint, "resumed": resumed}[what](w)
    w.shutdown()


if __name__ == "__main__":
    main()
