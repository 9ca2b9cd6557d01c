"""PyTorch as people write it, through psrun jobs (idioms_worker.py checks each worker against
one process on the global batch, to a relative 1e-5 after 20 steps, and prints PASS)."""

import os
import subprocess

import pytest

from conftest import run_job, transports


def passes(r, scenario, n):
    assert r.rc == 0, r.out
    assert r.count(f"PASS {scenario} rank") == n, r.out


@pytest.mark.parametrize("n", [2, 4])
def test_clip_after_synchronize_then_step_in_skip_synchronize_matches_one_process(n):
    passes(run_job(f"--transport tcp -n {n}", "idioms_worker.py", "clip"), "clip", n)


@pytest.mark.parametrize("transport", transports())
def test_scale_unscale_in_place_and_a_skipped_overflow_step_match_one_process(transport):
    passes(run_job(f"--transport {transport} -n 2", "idioms_worker.py", "scale"), "scale", 2)


def test_accumulation_by_backward_passes_per_step_and_no_sync_matches_one_process():
    passes(run_job("--transport tcp -n 4", "idioms_worker.py", "accum"), "accum", 4)


def test_psrun_max_grad_norm_clips_with_torch_norm_in_sum_mode():
    passes(run_job("--transport tcp -n 2 --max-grad-norm 0.5", "idioms_worker.py", "psrun_clip"),
           "psrun_clip", 2)


def test_editing_grad_in_place_after_backward_does_not_change_what_was_pushed():
    passes(run_job("--transport tcp -n 2", "idioms_worker.py", "touch"), "touch", 2)


def test_allreduce_and_broadcast_are_exact_beside_a_model_on_the_servers():
    passes(run_job("--transport tcp -n 4 -s 2", "idioms_worker.py", "collectives"),
           "collectives", 4)


def test_a_script_without_close_exits_0_and_so_does_the_job():
    r = run_job("--transport tcp -n 2", "idioms_worker.py", "noclose")
    passes(r, "noclose", 2)
    assert "lost" not in r.out and "ERROR" not in r.out, r.out


def test_workers_get_torchrun_variables_counting_workers_only():
    passes(run_job("--transport tcp -n 3 -s 2 --env PSRT_TEST_FOO=a=b", "idioms_worker.py",
                   "env"), "env", 3)


def psrun_out(args, env=None):
    p = subprocess.run([os.environ["PSRUN"]] + args, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout + p.stderr


def test_env_and_pythonpath_reach_every_process_over_ssh():
    # --dry-run prints each host's command with its environment, without running ssh.
    rc, out = psrun_out(["--launcher", "ssh", "--dry-run", "-H", "127.0.0.1,localhost", "-n", "2",
                         "--env", "PSRT_TEST_FOO=bar", "--env", "PSRT_TEST_BAR", "--",
                         "/usr/bin/python3", "x.py"],
                        {"PYTHONPATH": "/opt/pp", "PSRT_TEST_BAR": "here", "NCCL_DEBUG": "INFO",
                         "CUDA_VISIBLE_DEVICES": "3"})
    assert rc == 0, out
    for var in ("PSRT_TEST_FOO=bar", "PSRT_TEST_BAR=here", "PYTHONPATH=/opt/pp",
                "NCCL_DEBUG=INFO"):
        assert out.count(var) == 3, (var, out)  # 1 server + 2 workers
    assert "CUDA_VISIBLE_DEVICES" not in out, out  # one host's GPUs: not forwarded by default


def test_env_refuses_what_psrun_sets_and_names_left_unset():
    rc, out = psrun_out(["-n", "1", "--env", "RANK=3", "--", "true"])
    assert rc != 0 and "--env RANK=3: psrun sets RANK itself" in out, out
    rc, out = psrun_out(["-n", "1", "--env", "PSRT_TEST_UNSET_X", "--", "true"])
    assert rc != 0 and "PSRT_TEST_UNSET_X is not set here" in out, out
