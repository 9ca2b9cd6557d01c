"""Runs psrun jobs for the Python tests. ctest sets PSRUN (psrun's path), PYTHONPATH (the module
in the build tree), PSRT_TEST_PYTHON (the interpreter the module is built for) and
PSRT_TEST_TRANSPORTS (the transports built)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Job:
    def __init__(self, rc, out, seconds):
        self.rc, self.out, self.seconds = rc, out, seconds

    def count(self, text):
        return self.out.count(text)


def transports():
    return os.environ.get("PSRT_TEST_TRANSPORTS", "tcp").split(";")


def run_job(psrun_args, script, script_args="", timeout=120):
    """psrun PSRUN_ARGS -- python SCRIPT SCRIPT_ARGS, bounded; psrun stops its processes."""
    psrun = os.environ.get("PSRUN")
    if not psrun:
        pytest.fail("PSRUN is not set: run the tests through ctest (ctest -L python)")
    python = os.environ.get("PSRT_TEST_PYTHON", sys.executable)
    cmd = ([psrun] + psrun_args.split() + ["--", python, str(HERE / script)] +
           script_args.split())
    start = time.monotonic()
    # psrun runs in its own session so that a timeout can stop it and everything it started.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 15)
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
        pytest.fail(f"psrun did not finish within {timeout} s:\n{out}")
    return Job(p.returncode, out, time.monotonic() - start)
