"""psrt.torch.DistributedOptimizer: jobs through psrun (torch_worker.py checks values itself) and
the optimizers it refuses."""

import re

import pytest
import torch

import psrt.torch
from conftest import run_job


def test_one_worker_through_the_servers_matches_torch_sgd_step_for_step():
    r = run_job("--transport tcp -n 1", "torch_worker.py", "equiv")
    assert r.rc == 0, r.out
    assert r.count("PASS equiv") == 1, r.out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_workers_start_from_rank_0_and_hold_the_same_weights_every_step(dtype):
    r = run_job("--transport tcp -n 2", "torch_worker.py", f"sync {dtype}")
    assert r.rc == 0, r.out
    assert r.count("PASS sync") == 2, r.out
    for what in ["initial"] + [f"step {i}" for i in range(10)]:
        digests = re.findall(rf"{what} ([0-9a-f]+) rank \d", r.out)
        assert len(digests) == 2 and digests[0] == digests[1], (what, r.out)
    first = re.search(r"step 0 ([0-9a-f]+)", r.out).group(1)
    last = re.search(r"step 9 ([0-9a-f]+)", r.out).group(1)
    assert first != last, r.out


def model():
    return torch.nn.Linear(4, 2)


def test_an_optimizer_the_servers_cannot_run_is_refused_naming_sgd():
    m = model()
    with pytest.raises(TypeError, match=r"the servers run torch\.optim\.SGD .*torch\.optim\.adam"
                                        r"\.Adam cannot run there"):
        psrt.torch.DistributedOptimizer(torch.optim.Adam(m.parameters()),
                                        named_parameters=m.named_parameters())


def test_param_groups_with_different_hyper_parameters_are_refused():
    m = model()
    opt = torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.5}], lr=0.1)
    with pytest.raises(ValueError, match="group 1 has .*one set of SGD hyper-parameters"):
        psrt.torch.DistributedOptimizer(opt, named_parameters=m.named_parameters())


def test_maximize_is_refused():
    m = model()
    with pytest.raises(ValueError, match=r"SGD\(maximize=True\) is not supported"):
        psrt.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, maximize=True))
