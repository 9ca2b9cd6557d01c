#!/usr/bin/env python3
"""LeNet-5 on Fashion-MNIST in plain PyTorch, trained through psrt's parameter servers.

    psrun -n 4 -- /usr/bin/python3 examples/python/train_lenet.py            # 5 epochs, sync
    PYTHONPATH=build/python psrun -n 4 -- /usr/bin/python3 examples/python/train_lenet.py

The same job as `psrun -n 4 -- pstrain --model lenet --epochs 5`: batch 16 per worker, SGD
lr 0.04 with momentum 0.9 and a cosine schedule per step, each worker on its own shard of a
permutation drawn per epoch. Reads Debian's dataset-fashion-mnist (the IDX files in
/usr/share/datasets/fashion-mnist, or --data-dir) without torchvision. Prints a line per epoch
and, on rank 0, a final JSON summary like pstrain's.
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import psrt
import psrt.torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as pstrain normalises


def read_idx(path, magic):
    """An IDX file (raw or .gz) as a uint8 array of its shape."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                data = f.read()
            break
    else:
        sys.exit(f"train_lenet: {path}[.gz] not found: install Debian's dataset-fashion-mnist "
                 "(apt-get install dataset-fashion-mnist) or pass --data-dir")
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        sys.exit(f"train_lenet: {path}: magic {got:#x}, expected {magic:#x} (not an IDX file?)")
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    arr = np.frombuffer(data, np.uint8, offset=4 + 4 * dims)
    if arr.size != math.prod(shape):
        sys.exit(f"train_lenet: {path}: {arr.size} bytes of data for shape {shape}")
    return arr.reshape(shape)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte"), 0x803)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte"), 0x801)
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


class LeNet(nn.Module):
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
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    loss, correct = 0.0, 0
    for i in range(0, len(x), batch):
        out = model(x[i:i + batch])
        loss += F.cross_entropy(out, y[i:i + batch], reduction="sum").item()
        correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(x), loss / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16, help="samples per step per worker")
    p.add_argument("--lr", type=float, default=0.04)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--data-dir", default=DEFAULT_DIR)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    a = p.parse_args()

    worker = psrt.Worker.from_env()
    rank, world = worker.rank, worker.num_workers
    # This host's cores shared by every worker and server of the job, as pstrain does.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // (world + worker.num_servers)))
    train_x, train_y = load(a.data_dir, "train")
    test_x, test_y = load(a.data_dir, "t10k")

    torch.manual_seed(a.seed)  # rank 0's initial weights are broadcast anyway
    model = LeNet()
    # sync: a round averages the workers' gradients. async/ssp apply each gradient alone, N times
    # as often: each gets lr / N (pstrain's rule).
    lr = a.lr if os.environ.get("PSRT_MODE", "sync") == "sync" else a.lr / world
    sgd = torch.optim.SGD(model.parameters(), lr=lr, momentum=a.momentum)
    opt = psrt.torch.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                          worker=worker)
    per_epoch = (len(train_x) // world) // a.batch_size
    total = per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        sgd, lambda step: 0.5 * (1.0 + math.cos(math.pi * step / total)))

    step, train_seconds, acc, test_loss = 0, 0.0, 0.0, 0.0
    wall = time.monotonic()
    for epoch in range(a.epochs):
        # One permutation per epoch, the same on every worker; rank r takes part r.
        perm = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
            a.seed * 1000003 + epoch))
        shard = perm[rank * (len(perm) // world):(rank + 1) * (len(perm) // world)]
        start = time.monotonic()
        losses, correct, seen = 0.0, 0, 0
        for i in range(per_epoch):
            if step == total:
                break
            idx = shard[i * a.batch_size:(i + 1) * a.batch_size]
            x, y = train_x[idx], train_y[idx]
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            losses += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
        epoch_seconds = time.monotonic() - start
        train_seconds += epoch_seconds
        opt.synchronize()
        if rank == 0:
            acc, test_loss = evaluate(model, test_x, test_y)
        rate = seen / max(epoch_seconds, 1e-9)
        print(f"epoch {epoch + 1}/{a.epochs} step {step}/{total} loss {losses / max(seen, 1):.4f} "
              f"train_acc {correct / max(seen, 1):.4f}" +
              (f" test_accuracy {acc:.4f} test_loss {test_loss:.4f}" if rank == 0 else "") +
              f" {rate:.0f} samples/s", flush=True)
        if step == total:
            break
    opt.close()
    per_worker = a.batch_size * step / train_seconds if train_seconds > 0 else 0.0
    if rank == 0:
        print(json.dumps({"model": "lenet", "dataset": "fashion-mnist", "device": "cpu",
                          "workers": world, "epochs": a.epochs, "steps": step,
                          "test_accuracy": acc, "test_loss": test_loss,
                          "samples_per_sec": per_worker * world,
                          "samples_per_sec_per_worker": per_worker,
                          "wall_s": time.monotonic() - wall, "ps": True,
                          "language": "python"}), flush=True)
    worker.shutdown()


if __name__ == "__main__":
    main()
