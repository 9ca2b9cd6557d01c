#!/usr/bin/python3
"""One small PyTorch training loop, run either by torch DDP (gloo) or by psrt.

    train.py --engine ddp  --model mlp --steps 30   # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    train.py --engine psrt --model mlp --steps 30   # as psrun's COMMAND (psrt.Worker.from_env)

The data are fixed random tensors made once (no loader), so a step is forward, backward and the
exchange. Rank 0 prints one JSON object: the engine, model, parameter bytes, workers and the
seconds per step over the timed steps (after --warmup steps; every step is waited for: DDP's
allreduce ends inside backward, psrt's pulls are waited for by synchronize() at the end).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """784-1024-1024-10: 1.86 M parameters, 7.45 MB; at batch 2 the exchange dominates."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet(nn.Module):
    """LeNet-5 on 1x28x28 inputs (Fashion-MNIST shapes): 61.7 k parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


MODELS = {"mlp": MLP, "lenet": LeNet}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("ddp", "psrt"), required=True)
    ap.add_argument("--model", choices=sorted(MODELS), default="mlp")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--label", default="", help="copied into the JSON line")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = MODELS[a.model]()
    x = torch.randn(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if a.engine == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        net = nn.parallel.DistributedDataParallel(model)
        finish = dist.barrier
    else:
        import psrt.torch
        opt = psrt.torch.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        rank, world = opt.worker.rank, opt.worker.num_workers
        net = model
        finish = opt.synchronize

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    finish()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    finish()
    elapsed = time.perf_counter() - t0
    loss = float(F.cross_entropy(model(x), y))
    if rank == 0:
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print(json.dumps({"engine": a.engine, "model": a.model, "label": a.label,
                          "workers": world, "param_bytes": nbytes, "batch": a.batch,
                          "steps": a.steps, "warmup": a.warmup, "s_per_step": elapsed / a.steps,
                          "samples_per_s": world * a.batch * a.steps / elapsed,
                          "loss": loss}), flush=True)
    if a.engine == "ddp":
        dist.destroy_process_group()
    else:
        opt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
