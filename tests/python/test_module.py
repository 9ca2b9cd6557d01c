"""The module without a job: errors, codes, keys."""

import os
import subprocess
import sys
import time

import pytest

import psrt


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_error_codes_are_psrt_error_code_values():
    assert int(psrt.ErrorCode.OK) == 0
    assert int(psrt.ErrorCode.INVALID_ARGUMENT) == 1
    assert int(psrt.ErrorCode.PEER_FAILED) == 4
    assert int(psrt.ErrorCode.TIMEOUT) == 5
    assert int(psrt.ErrorCode.NOT_FOUND) == 12
    assert issubclass(psrt.Error, Exception)


def test_key_of_is_fnv1a_of_the_name():
    for name in ["fc1.weight", "conv.0.bias", ""]:
        assert psrt.key_of(name) == fnv1a64(name.encode())


def test_from_env_outside_psrun_names_the_missing_variable():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSRT_")}
    code = ("import psrt\n"
            "try:\n    psrt.Worker.from_env()\n"
            "except psrt.Error as e:\n    print(int(e.code), e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("1 PSRT_SCHEDULER is not set"), out.stdout


def test_join_an_unreachable_scheduler_fails_within_the_connect_timeout():
    start = time.monotonic()
    with pytest.raises(psrt.Error) as e:
        psrt.Worker.join(scheduler="127.0.0.1:1", transport="tcp", secret="s" * 32,
                         connect_timeout_ms=500)
    assert time.monotonic() - start < 10
    assert "127.0.0.1:1" in str(e.value), str(e.value)
    assert e.value.code != psrt.ErrorCode.OK
