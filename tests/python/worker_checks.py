"""What the job workers of tests/python report with: a FAIL line and exit code 1, which the
pytest side reads from the job's output."""

import sys


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)
