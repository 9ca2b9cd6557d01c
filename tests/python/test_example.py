"""examples/python/train_lenet.py, short: 2 workers, 150 steps of Fashion-MNIST (Debian's
dataset-fashion-mnist). The full 5-epoch run and its accuracy are in perf/RESULTS.md.
examples/python/train_resnet.py on a small synthetic data set in Fashion-MNIST's files: an epoch,
its checkpoint, and a resumed second epoch, with AdamW on the servers and on the workers."""

import json
import os
import struct

import numpy as np
import pytest
import torch

from conftest import HERE, run_job

EXAMPLE = HERE.parent.parent / "examples" / "python" / "train_lenet.py"
RESNET = HERE.parent.parent / "examples" / "python" / "train_resnet.py"
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(DATA), reason=f"no {DATA}: apt-get install dataset-fashion-mnist")
def test_train_lenet_learns_and_prints_the_summary():
    r = run_job("--transport tcp -n 2", str(EXAMPLE), "--epochs 1 --max-steps 150", timeout=240)
    assert r.rc == 0, r.out
    assert r.count("epoch 1/1 step 150/150 loss") == 2, r.out
    line = next(l for l in r.out.splitlines() if l.startswith("[worker 0] {"))
    summary = json.loads(line[len("[worker 0] "):])
    assert summary["workers"] == 2 and summary["steps"] == 150, summary
    # Chance is 0.10; 150 steps through the servers reach well above it (0.7 and more).
    assert summary["test_accuracy"] > 0.5, summary
    assert summary["samples_per_sec"] > 0, summary


def write_idx(path, magic, array):
    path.write_bytes(struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape) +
                     array.tobytes())


def synthetic_fashion_mnist(folder, n=256):
    """n random 28x28 images and labels as Fashion-MNIST's train-* IDX files."""
    rng = np.random.default_rng(0)
    write_idx(folder / "train-images-idx3-ubyte", 0x803,
              rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    write_idx(folder / "train-labels-idx1-ubyte", 0x801, rng.integers(0, 10, n, dtype=np.uint8))


@pytest.mark.parametrize("on,mode", [("servers", "server"), ("workers", "sum")])
def test_train_resnet_trains_an_epoch_saves_the_optimizer_state_and_resumes(tmp_path, on, mode):
    synthetic_fashion_mnist(tmp_path)
    ckpt = tmp_path / "resnet.pt"
    # 256 samples, a global batch of 64 over 2 workers: 4 steps per epoch.
    args = (f"--data-dir {tmp_path} --batch-size 64 --warmup-steps 2 --optimizer-on {on} "
            f"--checkpoint {ckpt}")
    r = run_job("--transport tcp -n 2", str(RESNET), args + " --epochs 1", timeout=240)
    assert r.rc == 0, r.out
    assert r.count(f"done: 4 steps, mode {mode}") == 1, r.out
    saved = torch.load(ckpt)
    assert saved["epoch"] == 1
    params = saved["optim"]["param_groups"][0]["params"]
    state = saved["optim"]["state"]
    # The AdamW moments of every parameter, from the servers in server mode: 4 steps each.
    assert sorted(state) == sorted(params), (len(state), len(params))
    assert all(int(s["step"]) == 4 and s["exp_avg_sq"].abs().sum() > 0 for s in state.values())
    r = run_job("--transport tcp -n 2", str(RESNET), args + " --epochs 2 --resume", timeout=240)
    assert r.rc == 0, r.out
    assert r.count(f"done: 8 steps, mode {mode}") == 1, r.out
    saved = torch.load(ckpt)
    assert saved["epoch"] == 2
    assert all(int(s["step"]) == 8 for s in saved["optim"]["state"].values())
