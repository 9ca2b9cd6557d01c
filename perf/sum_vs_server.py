#!/usr/bin/env python3
"""Sum mode vs server-side SGD: samples/s of the same model, batch and job, one after the other.

    PYTHONPATH=build/python build/bin/psrun --transport tcp -n 2 -- \
        /usr/bin/python3 perf/sum_vs_server.py --steps 60

Each worker trains an MLP (784-1024-1024-10, ~1.9M parameters, batch 64 per worker) with
torch.optim.SGD(lr 0.01, momentum 0.9) through psrt.torch.DistributedOptimizer, first in mode
"server" (the servers run SGD; the pulls overlap the next forward), then in mode "sum" (the
servers average, every worker runs SGD locally), then server again (an order check), on fresh
copies of the model. The first 10 steps of each are warm-up. Rank 0 prints one JSON line.
"""

import argparse
import copy
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch


def run(w, model, label, mode, steps, batch, warmup=10):
    opt = psrt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01,
                                                          momentum=0.9),
                                          named_parameters=[(f"{label}.{n}", p)
                                                            for n, p in model.named_parameters()],
                                          worker=w, mode=mode)
    g = torch.Generator().manual_seed(w.rank)
    x, y = torch.randn(batch, 784, generator=g), torch.randint(0, 10, (batch,), generator=g)
    for i in range(steps + warmup):
        if i == warmup:
            w.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    opt.synchronize()
    seconds = time.perf_counter() - start
    opt.close()
    return steps * batch * w.num_workers / seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(1)
    w = psrt.Worker.from_env()
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))
    result = {}
    for label, mode in (("server", "server"), ("sum", "sum"), ("server_again", "server")):
        result[label] = round(run(w, copy.deepcopy(base), label, mode, a.steps, a.batch), 1)
    result["sum_over_server"] = round(result["sum"] / result["server"], 3)
    result.update(workers=w.num_workers, steps=a.steps, batch_per_worker=a.batch)
    if w.rank == 0:
        print(json.dumps(result), flush=True)
    w.shutdown()


if __name__ == "__main__":
    main()
