"""psrun --timeline FILE: one Chrome trace of every process's events per key and slice.

A sync job of 2 workers and 2 servers push_pulls 3 keys (one cut into 3 slices) for 6 rounds
(tests/integration/metrics_worker_main.cc). The trace must parse, hold for every worker and slice
one send and one reply per round (plus the init) with the versions 0, 1, ..., R in order, for
every server one update per round of each slice it holds (versions 1..R in order) and one receive
per worker and round, and its clocks must agree: an update of version v starts after every
worker began sending round v's gradient, and a reply of version v ends after that update ended,
each within the two processes' stated clock uncertainty (half the best CLOCK round trip) plus
1 ms. A FILE that cannot be written fails before the job starts.

Environment: PSRUN, METRICS_WORKER.
"""
import collections
import json
import os
import shutil
import subprocess
import tempfile

import pytest

PSRUN = os.environ["PSRUN"]
WORKER = os.environ["METRICS_WORKER"]
SIZES = [1000, 5000, 123]
ROUNDS = 6
WORKERS = 2
SLACK_US = 1000.0


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="psrt_timeline_test_")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run_job(workdir, timeline):
    open(os.path.join(workdir, "release"), "w").close()
    return subprocess.run(
        [PSRUN, "--transport", "tcp", "-n", str(WORKERS), "-s", "2", "--partition-bytes", "8192",
         "--timeline", timeline, "--", WORKER, "--rounds", str(ROUNDS),
         "--sizes", ",".join(map(str, SIZES)), "--dir", workdir],
        capture_output=True, text=True, timeout=60)


def test_timeline_holds_every_event_in_order_on_one_clock(workdir):
    path = os.path.join(workdir, "trace.json")
    r = run_job(workdir, path)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(path) as f:
        trace = json.load(f)
    procs = {p["process"]: p for p in trace["otherData"]["processes"]}
    assert sorted(procs) == ["server 0", "server 1", "worker 0", "worker 1"]
    for p in procs.values():
        assert 0 <= p["clock_uncertainty_us"] < 5000, p
    names = {e["pid"]: e["args"]["name"].split(" (")[0]
             for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    by = collections.defaultdict(list)  # (process, kind, key, slice) -> events in time order
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by[(names[e["pid"]], e["name"], e["args"]["key"], e["args"]["slice"])].append(e)
    for events in by.values():
        events.sort(key=lambda e: e["ts"])
    slices = sorted({(k[2], k[3]) for k in by if k[1] == "update"})
    assert len(slices) == 5  # 1000 and 123 floats: one slice each; 5000 floats at 8 KiB: three
    for w in range(WORKERS):
        for key, sl in slices:
            for kind in ("send", "reply"):
                ev = by[(f"worker {w}", kind, key, sl)]
                assert len(ev) == ROUNDS + 1, (w, kind, key, sl, len(ev))  # the init + R rounds
            versions = [e["args"]["arg"] for e in by[(f"worker {w}", "reply", key, sl)]]
            assert versions == list(range(ROUNDS + 1)), versions
    for key, sl in slices:
        owners = [s for s in ("server 0", "server 1") if by.get((s, "update", key, sl))]
        assert len(owners) == 1, (key, sl)
        server = owners[0]
        updates = by[(server, "update", key, sl)]
        assert [e["args"]["arg"] for e in updates] == list(range(1, ROUNDS + 1))
        assert len(by[(server, "receive", key, sl)]) == WORKERS * ROUNDS
        for w in range(WORKERS):
            worker = f"worker {w}"
            bound = (procs[server]["clock_uncertainty_us"] + procs[worker]["clock_uncertainty_us"]
                     + SLACK_US)
            sends = by[(worker, "send", key, sl)][1:]  # round v's send is the v-th after the init
            replies = by[(worker, "reply", key, sl)][1:]
            for v, (update, send, reply) in enumerate(zip(updates, sends, replies), start=1):
                assert update["ts"] >= send["ts"] - bound, (key, sl, w, v, update, send)
                assert (reply["ts"] + reply["dur"] >= update["ts"] + update["dur"] - bound), (
                    key, sl, w, v, update, reply)


def test_unwritable_timeline_fails_before_the_job(workdir):
    path = os.path.join(workdir, "no", "such", "dir", "trace.json")
    r = run_job(workdir, path)
    assert r.returncode == 1
    assert f"--timeline {path}: cannot write there" in r.stderr
    assert "PASS" not in r.stdout + r.stderr
