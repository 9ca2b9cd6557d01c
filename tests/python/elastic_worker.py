"""The worker program of test_elastic.py, run under psrun. Prints "PASS <scenario> rank <r>" on
success and exits 1 with a message otherwise.

    elastic_worker.py train STOP PACE_MS    a worker of the job: trains a small model with
                                            psrt.torch.DistributedOptimizer (sync), a step every
                                            PACE_MS, until the file STOP exists (at most 3000)
    elastic_worker.py joiner STOP STEPS     started later with psrun --join: joins the running
                                            job (no start-up barrier), starts from the job's
                                            current weights, not its own, trains STEPS steps,
                                            then writes STOP
"""

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch
from worker_checks import expect


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)


def run(scenario, stop, steps, pace_ms):
    w = psrt.Worker.from_env()
    # A joiner's own initial values differ from the job's: the ones it ends up with are pulled.
    torch.manual_seed(0 if scenario == "train" else 99)
    model = nn.Linear(8, 3)
    own = [p.detach().clone() for p in model.parameters()]
    expect(w.joined == (scenario == "joiner"),
           f"worker.joined is {w.joined} for the {scenario} scenario")
    opt = psrt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters(), worker=w)
    start = [p.detach().clone() for p in model.parameters()]
    if scenario == "joiner":
        expect(any(not torch.equal(a, b) for a, b in zip(own, start)),
               "the joiner kept its own initial weights instead of the job's")
    for step in range(steps):
        if scenario == "train" and os.path.exists(stop):
            break
        x, y = batch(w.rank, step)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        expect(torch.isfinite(loss).item(), f"step {step}: loss {loss.item()}")
        loss.backward()
        opt.step()
        if pace_ms:
            time.sleep(pace_ms / 1000)
    opt.synchronize()
    expect(scenario == "joiner" or os.path.exists(stop), f"no {stop} after {steps} steps")
    expect(any(not torch.equal(a, p) for a, p in zip(start, model.parameters())),
           "the weights did not move")
    print(f"PASS {scenario} rank {w.rank}", flush=True)
    if scenario == "joiner":
        open(stop, "w").close()
    opt.close()
    w.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "train":
        run("train", sys.argv[2], 3000, int(sys.argv[3]))
    else:
        run("joiner", sys.argv[2], int(sys.argv[3]), 0)
