"""Live metrics (psrun --metrics-port) scraped by a real Prometheus (Debian's prometheus 2.42).

A job of 3 workers and 2 servers push_pulls keys of known sizes for a known number of rounds
(tests/integration/metrics_worker_main.cc), worker 2 sleeping before each round; Prometheus
scrapes psrun's endpoint every second, and PromQL over its HTTP API must return the exact bytes
pushed once the job drained, every worker and server, and worker 2 as the straggler. Then the bad
inputs: a port in use or an address not allowed fails before the job starts, and a scrape (or a
client that stalls) during shutdown does not hold the job up.

Environment: PSRUN, METRICS_WORKER, PROMETHEUS (the prometheus binary).
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest

PSRUN = os.environ["PSRUN"]
WORKER = os.environ["METRICS_WORKER"]
PROMETHEUS = os.environ.get("PROMETHEUS") or shutil.which("prometheus") or ""

SIZES = [1000, 5000, 123]
ROUNDS = 20
WORKERS = 3
SERVERS = 2
SLOW_RANK = 2
SLOW_MS = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def job_command(port, workdir, extra=(), rounds=ROUNDS):
    return [PSRUN, "--transport", "tcp", "-n", str(WORKERS), "-s", str(SERVERS),
            "--metrics-port", str(port), *extra, "--", WORKER, "--rounds", str(rounds),
            "--sizes", ",".join(map(str, SIZES)), "--dir", workdir,
            "--slow-rank", str(SLOW_RANK), "--slow-ms", str(SLOW_MS)]


def fetch(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prometheus:
    """A Prometheus on 127.0.0.1 of its own (temp config and storage), scraping `target`."""

    def __init__(self, target, workdir):
        self.port = free_port()
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: psrt\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        self.log = open(os.path.join(workdir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(workdir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, promql):
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?" +
               urllib.parse.urlencode({"query": promql}))
        body = json.loads(fetch(url))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="psrt_metrics_test_")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def by_label(result, label):
    return {r["metric"][label]: float(r["value"][1]) for r in result}


@pytest.mark.skipif(not PROMETHEUS, reason="no prometheus binary (scripts/install_deps.sh)")
def test_prometheus_sees_traffic_servers_and_the_straggler(workdir):
    port = free_port()
    prom = Prometheus(f"127.0.0.1:{port}", workdir)
    log = open(os.path.join(workdir, "psrun.log"), "w")
    job = subprocess.Popen(job_command(port, workdir), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until("every worker's rounds",
                   lambda: all(os.path.exists(os.path.join(workdir, f"done.{r}"))
                               for r in range(WORKERS)), 30)
        pushed = sum(SIZES) * 4 * ROUNDS
        # Every worker's counter, exactly, once the job drained (a heartbeat reports it).
        got = wait_until(
            "the exact bytes pushed by every worker",
            lambda: (lambda v: v if len(v) == WORKERS and all(x == pushed for x in v.values())
                     else None)(by_label(prom.query("psrt_worker_pushed_bytes_total"), "rank")),
            25)
        assert got == {str(r): float(pushed) for r in range(WORKERS)}
        # The servers received exactly what the workers pushed, between them.
        wait_until("the servers' received bytes",
                   lambda: (lambda r: r and float(r[0]["value"][1]) == WORKERS * pushed)(
                       prom.query("sum(psrt_server_received_bytes_total)")), 10)
        ups = prom.query("psrt_process_up")
        roles = sorted((r["metric"]["role"], r["metric"]["rank"]) for r in ups)
        assert roles == [("server", "0"), ("server", "1"),
                         ("worker", "0"), ("worker", "1"), ("worker", "2")]
        assert all(r["metric"]["host"] == "127.0.0.1" for r in ups)
        assert by_label(prom.query("psrt_job_workers"), "job") == {"psrt": 3.0}
        steps = by_label(prom.query("psrt_worker_steps_total"), "rank")
        assert steps == {str(r): float(ROUNDS) for r in range(WORKERS)}
        rounds = prom.query("psrt_worker_push_pull_seconds_count")
        assert by_label(rounds, "rank") == {str(r): float(ROUNDS * len(SIZES))
                                            for r in range(WORKERS)}
        # The straggler: worker 2's mean lag behind each sync round's first gradient.
        lag = by_label(prom.query(
            "sum by (worker) (psrt_sync_lag_seconds_total) / "
            "sum by (worker) (psrt_sync_lag_samples_total)"), "worker")
        assert max(lag, key=lag.get) == str(SLOW_RANK), lag
        assert lag[str(SLOW_RANK)] > 0.5 * SLOW_MS / 1000, lag
        assert all(lag.get(str(r), 0) < lag[str(SLOW_RANK)] / 4 for r in range(WORKERS)
                   if r != SLOW_RANK), lag
    finally:
        open(os.path.join(workdir, "release"), "w").close()
        try:
            rc = job.wait(timeout=30)
        finally:
            if job.poll() is None:
                job.kill()
            prom.stop()
            log.close()
    out = open(os.path.join(workdir, "psrun.log")).read()
    assert rc == 0, out
    assert "where the time went" in out and "stragglers" in out, out


def test_port_in_use_fails_before_the_job(workdir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run(job_command(port, workdir), capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert f"--metrics-port {port}: cannot serve metrics on 127.0.0.1:{port}" in r.stderr
    assert "in use or not allowed" in r.stderr
    assert not any(n.startswith("done.") for n in os.listdir(workdir))  # no worker started
    assert "worker 0" not in r.stdout + r.stderr
    assert time.monotonic() - t0 < 10


def test_address_not_allowed_fails_before_the_job(workdir):
    # 192.0.2.1 (TEST-NET-1) is no address of this host: the endpoint cannot listen there.
    r = subprocess.run(job_command(0, workdir, ["--metrics-bind", "192.0.2.1"]),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "cannot serve metrics on 192.0.2.1:0" in r.stderr, r.stderr
    assert not any(n.startswith("done.") for n in os.listdir(workdir))


def test_scrapes_and_a_stalled_client_during_shutdown_do_not_hang_the_job(workdir):
    port = free_port()
    open(os.path.join(workdir, "release"), "w").close()  # workers leave after their rounds
    stop = threading.Event()
    scrapes = []

    def scrape():
        while not stop.is_set():
            try:
                scrapes.append(fetch(f"http://127.0.0.1:{port}/metrics", timeout=2))
            except OSError:
                time.sleep(0.02)

    t0 = time.monotonic()
    job = subprocess.Popen(job_command(port, workdir, rounds=5), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    scraper = threading.Thread(target=scrape)
    scraper.start()
    # A client that opens a request and never finishes it.
    stalled = wait_until("the metrics endpoint",
                         lambda: _try_connect(port), 15)
    stalled.sendall(b"GET /metr")
    try:
        out, _ = job.communicate(timeout=30)
    finally:
        stop.set()
        scraper.join()
        stalled.close()
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out
    assert time.monotonic() - t0 < 30
    assert any("psrt_job_workers" in s for s in scrapes)


def _try_connect(port):
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=1)
    except OSError:
        return None


def test_end_of_job_report_ranks_the_straggler_and_counts_exactly(workdir):
    open(os.path.join(workdir, "release"), "w").close()
    report = os.path.join(workdir, "report.json")
    cmd = job_command(0, workdir, rounds=10)
    at = cmd.index("--metrics-port")
    cmd[at:at + 2] = ["--report", "--json", report]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "psrun: where the time went" in r.stderr
    with open(report) as f:
        j = json.load(f)
    pushed = sum(SIZES) * 4 * 10
    assert [w["rank"] for w in j["workers"]] == list(range(WORKERS))
    assert all(w["pushed_bytes"] == pushed and w["steps"] == 10 for w in j["workers"]), j
    assert sum(s["received_bytes"] for s in j["servers"]) == WORKERS * pushed, j
    assert sum(s["sent_bytes"] for s in j["servers"]) == WORKERS * pushed, j
    assert j["stragglers"][0] == SLOW_RANK, j
    slow = j["workers"][SLOW_RANK]
    # The straggler computes (sleeps) while the others wait for it.
    assert slow["compute_s"] > 10 * SLOW_MS / 1000 * 0.8, slow
    for w in j["workers"]:
        if w["rank"] != SLOW_RANK:
            assert w["wait_s"] > slow["wait_s"], j
