"""The worker program the Python tests run under psrun. Each scenario drives psrt from Python and
checks exact values itself (integer-valued gradients, so every float sum is exact); it prints
"PASS <scenario> rank <r>" on success and exits 1 with a message otherwise.

    job_worker.py sync --rounds R      sum, lr 1: closed form after every round; the version
                                       a pull returned is the round, and so is version(key)
    job_worker.py async --rounds R     final = init - every gradient pushed by every worker
    job_worker.py zero_copy            pulls land in the objects' own memory; objects released
                                       before wait() (or never waited) are kept alive
    job_worker.py errors               wrong dtype, non-contiguous, not a buffer, unknown key
                                       (pull and version)
    job_worker.py lost_server          2 servers: one is killed, the next wait raises psrt.Error
    job_worker.py sigint               2 workers: rank 0 is interrupted in wait()
"""

import argparse
import gc
import os
import signal
import threading
import time
import weakref

import numpy as np
import torch

import psrt
from worker_checks import expect, fail

SIZES = [1, 7, 5000]  # 5000 floats = 5 slices of psrun --partition-bytes 4096 on 2 servers


def grad_of(rank, key, size, round_):
    # Small integers: every sum of them is exact in fp32 (and in fp16 for the half gradients).
    return ((np.arange(size) % 5) + rank + key + round_).astype(np.float32)


def init_keys(w, make, initial_version=True):
    out = {}
    for key, size in enumerate(SIZES):
        out[key] = make(np.full(size, 100.0, np.float32))
        if w.rank == 0:
            w.init(key, out[key])
    w.barrier()
    for key in out:
        h = w.pull(key, out[key])
        h.wait()
        # sync: no round completes before every worker pushed; async: others may have pushed
        expect(h.version() == 0 or not initial_version, f"key {key}: version {h.version()}")
    return out


def total(num_workers, key, size, round_):
    return sum(grad_of(r, key, size, round_) for r in range(num_workers))


def sync(w, rounds):
    # Weights alternate between a torch tensor and a NumPy array per key; gradients between
    # fp32 tensors, fp32 arrays and fp16 tensors.
    weights = init_keys(w, torch.from_numpy)
    weights[1] = weights[1].numpy()  # a NumPy view of the same memory
    # version(key): the servers' version now, min over the key's slices (key 2 spans both
    # servers). No round completes before this worker's first push: 0.
    for key in weights:
        expect(w.version(key) == 0, f"key {key}: version(key) {w.version(key)} before round 0")
    expected = {k: np.full(s, 100.0, np.float32) for k, s in enumerate(SIZES)}
    for r in range(rounds):
        handles = []  # (handle, the version it must return: round r + 1, 0 for a push)
        for key, size in enumerate(SIZES):
            g = grad_of(w.rank, key, size, r)
            kind = (key + r) % 3
            if kind == 0:
                handles.append((w.push_pull(key, torch.from_numpy(g), weights[key]), r + 1))
            elif kind == 1:
                handles.append((w.push_pull(key, g, weights[key]), r + 1))
            else:
                handles.append((w.push(key, torch.from_numpy(g).half()), 0))
                handles.append((w.pull(key, weights[key]), r + 1))
            expected[key] -= total(w.num_workers, key, size, r)
        for h, version in handles:
            expect(h.wait() is True, "wait() did not return True")
            expect(h.version() == version, f"round {r}: {h} version {h.version()}, not {version}")
        for key in weights:
            got = np.asarray(weights[key])
            expect(np.array_equal(got, expected[key]),
                   f"round {r} key {key}: {got[:4]} != {expected[key][:4]}")
            # Sync: round r + 2 needs this worker's next gradient, so the servers hold r + 1.
            v = w.version(key)
            expect(type(v) is int and v == r + 1, f"round {r} key {key}: version(key) {v!r}")
    print(f"PASS sync rank {w.rank}", flush=True)


def async_(w, rounds):
    weights = init_keys(w, torch.from_numpy, initial_version=False)
    for r in range(rounds):
        for key, size in enumerate(SIZES):
            w.push_pull(key, grad_of(w.rank, key, size, r), weights[key]).wait()
    w.barrier()  # every worker's pushes are in
    for key, size in enumerate(SIZES):
        h = w.pull(key, weights[key])
        h.wait()
        # async: a server update applies the gradients that arrived since the last one
        expect(rounds <= h.version() <= rounds * w.num_workers,
               f"async key {key}: version {h.version()}")
        want = np.full(size, 100.0, np.float32)
        for r in range(rounds):
            want -= total(w.num_workers, key, size, r)
        expect(np.array_equal(weights[key].numpy(), want), f"async key {key}: {weights[key][:4]}")
    print(f"PASS async rank {w.rank}", flush=True)


def release_within(seconds, refs, w, out):
    deadline = time.monotonic() + seconds
    gc.collect()
    while any(r() is not None for r in refs) and time.monotonic() < deadline:
        w.pull(0, out).wait()  # each new operation releases what is over
        gc.collect()


def zero_copy(w):
    n = 1000
    t = torch.full((n,), 3.0)
    w.init(0, t)
    out = torch.zeros(n)
    ptr = out.data_ptr()
    view = out[10:20]  # shares out's storage
    w.pull(0, out).wait()
    expect(out.data_ptr() == ptr, "pull moved the tensor's storage")
    expect(bool((view == 3.0).all()), "a view of the pulled tensor does not see the weights")
    arr = np.zeros(n, np.float32)
    mem = memoryview(arr)
    w.pull(0, mem).wait()  # through the buffer protocol, into the array's memory
    expect(bool((arr == 3.0).all()), "a pull into a memoryview did not land in its array")

    # Released by the caller before wait(): the Handle keeps it alive.
    lost = torch.zeros(n)
    ref = weakref.ref(lost)
    h = w.pull(0, lost)
    del lost
    gc.collect()
    expect(ref() is not None, "a tensor in use by a pull was freed")
    h.wait()
    del h
    release_within(10, [ref], w, out)
    expect(ref() is None, "the tensor outlived its completed operation and handle")

    # Never waited: kept alive until the operation is over, then released.
    grad = torch.ones(n)
    dropped = torch.zeros(n)
    gref, dref = weakref.ref(grad), weakref.ref(dropped)
    w.push_pull(0, grad, dropped)
    del grad, dropped
    release_within(10, [gref, dref], w, out)
    expect(gref() is None and dref() is None, "a dropped operation's tensors were never released")
    print(f"PASS zero_copy rank {w.rank}", flush=True)


def expect_error(code, text, fn):
    try:
        fn()
    except psrt.Error as e:
        expect(e.code == code, f"{text!r}: code {e.code}, wanted {code} ({e})")
        expect(text in str(e), f"error text {str(e)!r} does not name {text!r}")
        return str(e)
    fail(f"no psrt.Error for {text!r}")


def errors(w):
    n = 8
    w.init(0, torch.zeros(n))
    out = torch.zeros(n)
    INVALID = psrt.ErrorCode.INVALID_ARGUMENT
    expect_error(INVALID, "torch.float64", lambda: w.pull(0, torch.zeros(n, dtype=torch.float64)))
    expect_error(INVALID, "torch.float16", lambda: w.pull(0, torch.zeros(n, dtype=torch.half)))
    expect_error(INVALID, "not contiguous", lambda: w.pull(0, torch.zeros(2 * n)[::2]))
    expect_error(INVALID, "not contiguous", lambda: w.push(0, torch.zeros(n, 2).t()))
    expect_error(INVALID, "not C-contiguous", lambda: w.pull(0, np.zeros(2 * n, np.float32)[::2]))
    expect_error(INVALID, "format 'd'", lambda: w.push(0, np.zeros(n)))
    expect_error(INVALID, "is a list", lambda: w.push(0, [0.0] * n))
    ro = np.zeros(n, np.float32)
    ro.flags.writeable = False
    expect_error(INVALID, "cannot be used in place", lambda: w.pull(0, ro))
    expect_error(INVALID, "timeout=-1", lambda: w.pull(0, out).wait(timeout=-1))
    msg = expect_error(psrt.ErrorCode.NOT_FOUND, "unknown key 12345",
                       lambda: w.pull(12345, out).wait())
    print(f"unknown key: {msg}", flush=True)
    msg = expect_error(psrt.ErrorCode.NOT_FOUND, "unknown key 12346", lambda: w.version(12346))
    print(f"version of an unknown key: {msg}", flush=True)
    expect(w.version(0) == 0, f"version(0) {w.version(0)} with no push")
    expect(isinstance(psrt.Error("x"), Exception), "psrt.Error is not an Exception")
    w.pull(0, out).wait()  # the worker goes on after refused calls
    print(f"PASS errors rank {w.rank}", flush=True)


def server_pids():
    """The servers of this job: this host's processes with our scheduler and PSRT_ROLE=server."""
    me = os.environ["PSRT_SCHEDULER"].encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"PSRT_ROLE=server" in env and b"PSRT_SCHEDULER=" + me in env:
            pids.append(int(d))
    return pids


def lost_server(w):
    # psrun stops the job when a server dies: finish our check before its SIGTERM ends us.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    n = 5000
    weights = torch.zeros(n)
    w.init(0, weights)
    w.push_pull(0, torch.ones(n), weights).wait()
    pids = server_pids()
    expect(len(pids) == 2, f"found servers {pids}")
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(100):  # until the loss is seen; each wait is bounded
            w.push_pull(0, torch.ones(n), weights).wait(timeout=30)
            time.sleep(0.05)
        fail("no error after the server was killed")
    except psrt.Error as e:
        # The connection's own error, or the scheduler's verdict that ended the job first.
        lost = (psrt.ErrorCode.PEER_FAILED, psrt.ErrorCode.CONNECTION_CLOSED,
                psrt.ErrorCode.CANCELLED)
        expect(e.code in lost, f"code {e.code}: {e}")
        expect("server 1" in str(e), f"the error does not name server 1: {e}")
        print(f"lost server: {e.code}: {e}", flush=True)
    expect(time.monotonic() - start < 20, "the error took more than 20 s")
    print(f"PASS lost_server rank {w.rank}", flush=True)
    os._exit(0)  # the job is broken; leave without the shutdown handshake


def sigint(w):
    n = 16
    weights = torch.zeros(n)
    if w.rank == 0:
        w.init(0, weights)
    w.barrier()
    if w.rank == 1:
        time.sleep(3)  # rank 0's round waits for this push
        w.push_pull(0, torch.ones(n), weights).wait()
        print(f"PASS sigint rank {w.rank}", flush=True)
        return
    h = w.push_pull(0, torch.ones(n), weights)
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        h.wait()
        fail("wait() returned although its round needs rank 1's push")
    except KeyboardInterrupt:
        waited = time.monotonic() - start
        expect(waited < 2.0, f"KeyboardInterrupt after {waited:.2f} s")
        print(f"interrupted after {waited:.2f} s", flush=True)
    expect(not h.ready(), "the round completed before rank 1 pushed")
    h.wait()  # the operation goes on after the interrupt
    expect(bool((weights == -2.0).all()), f"weights {weights}")  # sum of 2 ones, lr 1
    print(f"PASS sigint rank {w.rank}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    w = psrt.Worker.from_env()
    if a.scenario == "sync":
        sync(w, a.rounds)
    elif a.scenario == "async":
        async_(w, a.rounds)
    elif a.scenario == "zero_copy":
        zero_copy(w)
    elif a.scenario == "errors":
        errors(w)
    elif a.scenario == "lost_server":
        lost_server(w)
    elif a.scenario == "sigint":
        sigint(w)
    else:
        fail(f"unknown scenario {a.scenario}")
    w.shutdown()


if __name__ == "__main__":
    main()
