"""The worker API from Python through real psrun jobs on 127.0.0.1 (job_worker.py checks the
values itself and prints PASS)."""

import pytest

from conftest import run_job, transports

SUM = "--lr 1 --aggregate sum --partition-bytes 4096"


@pytest.mark.parametrize("transport", transports())
def test_sync_sums_are_exact_every_round(transport):
    r = run_job(f"--transport {transport} -n 4 -s 2 {SUM}", "job_worker.py", "sync --rounds 4")
    assert r.rc == 0, r.out
    assert r.count("PASS sync") == 4, r.out


@pytest.mark.parametrize("transport", transports())
def test_async_final_weights_hold_every_gradient(transport):
    r = run_job(f"--transport {transport} -n 4 -s 2 --mode async {SUM}", "job_worker.py",
                "async --rounds 4")
    assert r.rc == 0, r.out
    assert r.count("PASS async") == 4, r.out


def test_pulls_land_in_place_and_tensors_live_until_the_operation_is_over():
    r = run_job(f"--transport tcp -n 1 {SUM}", "job_worker.py", "zero_copy")
    assert r.rc == 0, r.out
    assert r.count("PASS zero_copy") == 1, r.out


def test_bad_arguments_and_unknown_keys_raise_psrt_error_with_their_code():
    r = run_job(f"--transport tcp -n 1 {SUM}", "job_worker.py", "errors")
    assert r.rc == 0, r.out
    assert r.count("PASS errors") == 1, r.out
    # The C++ message, naming the key and the cause.
    assert "unknown key 12345: no worker has called init() for it" in r.out, r.out
    assert "version of an unknown key: scheduler" in r.out, r.out
    assert "refused LOCATE of key 12346: unknown key 12346: no worker has called init() for it" \
        in r.out, r.out


def test_a_lost_server_raises_psrt_error_without_hanging():
    r = run_job(f"--transport tcp -n 1 -s 2 {SUM}", "job_worker.py", "lost_server", timeout=60)
    assert r.count("PASS lost_server") == 1, r.out
    assert "closed the connection" in r.out or "lost" in r.out, r.out
    assert r.rc != 0, r.out  # psrun reports the killed server
    assert r.seconds < 40, r.out


def test_ctrl_c_during_wait_raises_keyboard_interrupt():
    r = run_job(f"--transport tcp -n 2 {SUM}", "job_worker.py", "sigint", timeout=60)
    assert r.rc == 0, r.out
    assert r.count("PASS sigint") == 2, r.out
    assert "interrupted after 0." in r.out or "interrupted after 1." in r.out, r.out
