"""examples/python/train_lenet.py, short: 2 workers, 150 steps of Fashion-MNIST (Debian's
dataset-fashion-mnist). The full 5-epoch run and its accuracy are in perf/RESULTS.md."""

import json
import os

import pytest

from conftest import HERE, run_job

EXAMPLE = HERE.parent.parent / "examples" / "python" / "train_lenet.py"
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
