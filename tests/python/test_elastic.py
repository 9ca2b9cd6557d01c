"""A Python worker that joins a running job (docs/elastic.md): psrun --join-file, then psrun
--join, with psrt.torch.DistributedOptimizer on both sides."""

import json
import os
import subprocess
import sys
import time
from conftest import HERE


def test_a_python_joiner_trains_in_the_running_job(tmp_path):
    transport = "tcp"  # the C++ JoinTest runs ucx too
    psrun = os.environ["PSRUN"]
    python = os.environ.get("PSRT_TEST_PYTHON", sys.executable)
    join, trace, stop = tmp_path / "join.env", tmp_path / "trace.jsonl", tmp_path / "stop"
    env = dict(os.environ, PSRT_SERVER_TRACE=str(trace))
    job = subprocess.Popen(
        [psrun, "--transport", transport, "-n", "2", "--lr", "0.1", "--join-file", str(join),
         "--", python, str(HERE / "elastic_worker.py"), "train", str(stop), "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                join.exists() and trace.exists() and len(trace.read_text().splitlines()) >= 5):
            time.sleep(0.05)
        assert join.exists(), "psrun wrote no join file"
        joiner = subprocess.run(
            [psrun, "--join", str(join), "--", python, str(HERE / "elastic_worker.py"),
             "joiner", str(stop), "10"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=90)
        out, _ = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
    assert joiner.returncode == 0, joiner.stdout
    assert "PASS joiner rank 2" in joiner.stdout, joiner.stdout
    assert job.returncode == 0, out
    assert out.count("PASS train") == 2, out
    rounds = [json.loads(line) for line in trace.read_text().splitlines()]
    assert any(2 in r["ranks"] for r in rounds), "the joiner's gradients were never applied"
