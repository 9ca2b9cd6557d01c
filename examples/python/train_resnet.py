#!/usr/bin/env python3
"""ResNet-20 on Fashion-MNIST through psrt, written as a PyTorch user writes a training loop.

    PYTHONPATH=build/python psrun -n 4 -- /usr/bin/python3 examples/python/train_resnet.py
    PYTHONPATH=build/python psrun -n 4 -- /usr/bin/python3 examples/python/train_resnet.py \\
        --optimizer-on servers --optimizer sgd                 # SGD run by the servers

What it shows (docs/migrating.md): a DataLoader with DistributedSampler(ds, num_replicas=N,
rank=r); AdamW in sum mode (the servers average, each worker steps AdamW itself) or SGD on the
servers; linear warm-up then cosine decay per step; torch.nn.utils.clip_grad_norm_ between
opt.synchronize() and `with opt.skip_synchronize(): opt.step()`; bf16 autocast; the rank's GPU
with --device cuda (psrt.torch.device()); a checkpoint every epoch on rank 0 (torch.save of the
model and opt.state_dict()) and --resume from it, with any number of workers. The data are
Debian's dataset-fashion-mnist IDX files, read as train_lenet.py reads them.
"""

import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import psrt
import psrt.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_lenet import DEFAULT_DIR, load  # noqa: E402  (the IDX reader)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class ResNet20(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(Block(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128, help="global batch (all workers)")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--optimizer-on", choices=["workers", "servers"], default="workers",
                   help="workers: sum mode; servers: mode 'server' (SGD)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--device", default="cpu", help="cpu | cuda (the rank's GPU)")
    p.add_argument("--bf16", action="store_true", help="autocast to bfloat16")
    p.add_argument("--checkpoint", default="", help="file rank 0 saves every epoch")
    p.add_argument("--resume", action="store_true", help="start from --checkpoint")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--data-dir", default=DEFAULT_DIR)
    a = p.parse_args()

    worker = psrt.default_worker()
    rank, world = worker.rank, worker.num_workers
    device = psrt.torch.device() if a.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    model = ResNet20().to(device)
    if a.optimizer == "adamw":
        base = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.05)
    else:
        base = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    start_epoch, state = 0, None
    if a.resume and a.checkpoint and os.path.exists(a.checkpoint):
        state = torch.load(a.checkpoint, map_location=device)
        model.load_state_dict(state["model"])  # rank 0's is broadcast by the optimizer
        start_epoch = state["epoch"]
    mode = "sum" if a.optimizer_on == "workers" else "server"
    opt = psrt.torch.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                          worker=worker, mode=mode)
    if state is not None:
        # Every worker: the moments go to the local optimizer (sum mode) or to the servers.
        opt.load_state_dict(state["optim"])

    x, y = load(a.data_dir, "train")
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=a.batch_size // world, sampler=sampler, drop_last=True)
    total = a.epochs * len(loader)
    if a.max_steps:
        total = min(total, a.max_steps)

    def rate(step):  # linear warm-up, then cosine to 0
        if step < a.warmup_steps:
            return (step + 1) / a.warmup_steps
        return 0.5 * (1 + math.cos(math.pi * (step - a.warmup_steps) /
                                   max(1, total - a.warmup_steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(base, rate)
    for _ in range(start_epoch * len(loader)):
        sched.step()

    step = start_epoch * len(loader)
    for epoch in range(start_epoch, a.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            if a.max_steps and step >= a.max_steps:
                break
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            if opt.mode == "sum":
                opt.synchronize()
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
            sched.step()
            step += 1
            if step % 50 == 0:
                avg = psrt.allreduce(loss.detach().float().cpu(), op="mean", name="loss")
                if rank == 0:
                    print(f"epoch {epoch + 1} step {step}/{total} loss {avg.item():.4f} "
                          f"lr {sched.get_last_lr()[0]:.2e}", flush=True)
        opt.synchronize()
        if rank == 0 and a.checkpoint:
            # Server mode: state_dict() fetches the servers' moments (torch's format either way).
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                        "epoch": epoch + 1}, a.checkpoint)
        if a.max_steps and step >= a.max_steps:
            break
    if rank == 0:
        print(f"done: {step} steps, mode {opt.mode}", flush=True)


if __name__ == "__main__":
    main()
