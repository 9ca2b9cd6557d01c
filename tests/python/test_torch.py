"""psrt.torch.DistributedOptimizer: jobs through psrun (torch_worker.py checks values itself) and
the optimizers server mode refuses (mode "auto" trains them in sum mode: test_idioms.py)."""

import re

import pytest
import torch

import psrt.torch
from conftest import run_job, transports


@pytest.mark.parametrize("transport", transports())
def test_four_workers_two_servers_match_one_process_of_torch_adamw(transport):
    r = run_job(f"--transport {transport} -n 4 -s 2", "torch_worker.py", "adamw")
    assert r.rc == 0, r.out
    assert r.count("PASS adamw") == 4, r.out


def test_adamw_state_dict_mid_run_holds_the_servers_moments_and_resumes_a_fresh_job(tmp_path):
    # Fixed 1 KiB slices: every weight matrix is cut over both servers.
    job = "--transport tcp -n 2 -s 2 --partition-bytes 1024"
    r = run_job(job, "state_worker.py", f"save {tmp_path}")
    assert r.rc == 0, r.out
    assert r.count("PASS save rank") == 2, r.out
    # A fresh job of the same shape: exactly where the uninterrupted run went.
    r = run_job(job, "state_worker.py", f"resume {tmp_path} exact")
    assert r.rc == 0, r.out
    assert r.count("PASS resume rank") == 2, r.out
    # Another number of workers and servers, another cut: as one torch AdamW resumed.
    r = run_job("--transport tcp -n 4 -s 3", "state_worker.py", f"resume {tmp_path}")
    assert r.rc == 0, r.out
    assert r.count("PASS resume rank") == 4, r.out


def test_request_checkpoint_from_python_saves_that_round_and_a_new_job_resumes_there(tmp_path):
    job = f"--transport tcp -n 2 -s 2 --checkpoint-dir {tmp_path}"
    r = run_job(job, "state_worker.py", "checkpoint")
    assert r.rc == 0, r.out
    assert r.count("PASS checkpoint rank") == 2, r.out
    want = re.findall(r"round 3 weights (\S+) rank", r.out)
    assert len(want) == 2 and want[0] == want[1], r.out
    assert (tmp_path / "r000000000003").is_dir(), sorted(p.name for p in tmp_path.iterdir())
    r = run_job(job, "state_worker.py", "resumed")
    assert r.rc == 0, r.out
    assert r.count("PASS resumed rank") == 2, r.out
    assert re.findall(r"resumed weights (\S+) rank", r.out) == want, r.out


def test_request_checkpoint_without_a_checkpoint_dir_names_the_flag():
    r = run_job("--transport tcp -n 1", "state_worker.py", "checkpoint")
    assert r.rc != 0, r.out
    assert "the job has no checkpoint directory; start it with psrun --checkpoint-dir" in r.out


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


def test_an_optimizer_the_servers_cannot_run_is_refused_in_server_mode_naming_sgd():
    m = model()
    with pytest.raises(TypeError, match=r"the servers run torch\.optim\.SGD .*torch\.optim\.rmsprop"
                                        r"\.RMSprop cannot run there"):
        psrt.torch.DistributedOptimizer(torch.optim.RMSprop(m.parameters()), mode="server",
                                        named_parameters=m.named_parameters())


def test_amsgrad_and_maximize_are_refused_for_adam():
    m = model()
    with pytest.raises(ValueError, match=r"AdamW\(amsgrad=True\) is not supported"):
        psrt.torch.DistributedOptimizer(torch.optim.AdamW(m.parameters(), amsgrad=True),
                                        mode="server")
    with pytest.raises(ValueError, match=r"Adam\(maximize=True\) is not supported"):
        psrt.torch.DistributedOptimizer(torch.optim.Adam(m.parameters(), maximize=True),
                                        mode="server")


def test_adam_param_groups_with_different_betas_are_refused():
    m = model()
    opt = torch.optim.Adam([{"params": [m.weight]}, {"params": [m.bias], "betas": (0.5, 0.9)}])
    with pytest.raises(ValueError, match="group 1 has .*one set of Adam hyper-parameters"):
        psrt.torch.DistributedOptimizer(opt, mode="server",
                                        named_parameters=m.named_parameters())


def test_server_mode_refuses_clipping_it_cannot_do_with_torch_norm():
    m = model()
    with pytest.raises(ValueError, match=r"max_grad_norm 1\.0 .*use mode='sum'"):
        psrt.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), mode="server",
                                        max_grad_norm=1.0)


def test_device_is_the_rank_gpu_never_silently_cuda_0(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("PSRT_GPU", "2")
    monkeypatch.setenv("PSRT_LOCAL_RANK", "1")
    assert psrt.torch.device() == torch.device("cuda", 2)  # psrun's placement wins
    monkeypatch.delenv("PSRT_GPU")
    assert psrt.torch.device() == torch.device("cuda", 1)  # else the worker-local rank
    monkeypatch.setenv("PSRT_LOCAL_RANK", "5")
    assert psrt.torch.device() == torch.device("cuda", 1)  # 5 workers over 4 GPUs: 5 mod 4
    monkeypatch.setenv("PSRT_GPU", "7")
    with pytest.raises(psrt.Error, match="PSRT_GPU=7, but this process sees 4 GPU"):
        psrt.torch.device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert psrt.torch.device() == torch.device("cpu")


def test_param_groups_with_different_hyper_parameters_are_refused():
    m = model()
    opt = torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.5}], lr=0.1)
    with pytest.raises(ValueError, match="group 1 has .*one set of SGD hyper-parameters"):
        psrt.torch.DistributedOptimizer(opt, named_parameters=m.named_parameters(), mode="server")


def test_maximize_is_refused():
    m = model()
    with pytest.raises(ValueError, match=r"SGD\(maximize=True\) is not supported"):
        psrt.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, maximize=True),
                                        mode="server")
