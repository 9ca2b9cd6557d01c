#!/usr/bin/env python3
"""Compares psbench transport against ucx_perftest on this machine, in one run.

For each comparison both tools run back to back, alternating, --runs times; the script prints
the median of each and their ratio, against the bars of the transport issue:
  ucx  4 MiB bandwidth  >= 0.90 x ucx_perftest -t tag_bw -s 4194304          (same UCX_TLS)
  tcp  4 MiB bandwidth  >= 0.90 x UCX_TLS=tcp ucx_perftest -t tag_bw -s 4194304
  ucx/tcp 8 B latency p50 <= 1.5 x ucx_perftest -t tag_lat -s 8            (matching UCX_TLS)
Both tools count MB as 2^20 bytes and latency as half the round trip.

Usage: perf/transport_vs_perftest.py [--bin build/bin] [--runs 3] [--json out.json]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def perftest(test, size, iters, tls):
    env = dict(os.environ)
    if tls:
        env["UCX_TLS"] = tls
    else:
        env.pop("UCX_TLS", None)
    port = str(free_port())
    server = subprocess.Popen(["ucx_perftest", "-p", port], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", port, "-t", test, "-s", str(size),
                              "-n", str(iters)], env=env, capture_output=True, text=True,
                             timeout=300, check=True).stdout
    finally:
        server.wait(timeout=30)
    final = [l for l in out.splitlines() if l.startswith("Final:")][0].split()
    # Final: iters  p50_lat  avg_lat  overall_lat  avg_bw  overall_bw  avg_rate  overall_rate
    return {"lat_us_p50": float(final[2]), "bandwidth_MBps": float(final[6])}


def psbench(bindir, transport, mode, size, iters, tls):
    env = dict(os.environ)
    if tls:
        env["UCX_TLS"] = tls
    else:
        env.pop("UCX_TLS", None)
    out = subprocess.run([os.path.join(bindir, "psbench"), "transport", "--transport", transport,
                          "--mode", mode, "--size", str(size), "--iters", str(iters)],
                         env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    cases = [
        # name, psbench transport, mode, size, iters, UCX_TLS, perftest test, metric, bar, better
        ("ucx bw 4MiB", "ucx", "bw", 4194304, 1000, None, "tag_bw", "bandwidth_MBps", 0.90, "higher"),
        ("tcp bw 4MiB", "tcp", "bw", 4194304, 500, "tcp", "tag_bw", "bandwidth_MBps", 0.90, "higher"),
        ("ucx lat 8B", "ucx", "lat", 8, 100000, None, "tag_lat", "lat_us_p50", 1.5, "lower"),
        ("tcp lat 8B", "tcp", "lat", 8, 50000, "tcp", "tag_lat", "lat_us_p50", 1.5, "lower"),
    ]
    results = []
    ok = True
    for name, transport, mode, size, iters, tls, test, metric, bar, better in cases:
        ours, theirs = [], []
        for _ in range(args.runs):
            theirs.append(perftest(test, size, iters, tls)[metric])
            ours.append(psbench(args.bin, transport, mode, size, iters, tls)[metric])
        o, t = statistics.median(ours), statistics.median(theirs)
        ratio = o / t
        passed = ratio >= bar if better == "higher" else ratio <= bar
        ok &= passed
        row = {"case": name, "metric": metric, "psbench": o, "ucx_perftest": t, "ratio": ratio,
               "bar": ("%s %.2f" % (">=" if better == "higher" else "<=", bar)), "meets_bar": passed,
               "psbench_runs": ours, "perftest_runs": theirs, "UCX_TLS": tls or "default"}
        results.append(row)
        print("%-12s %-15s psbench %10.3f  ucx_perftest %10.3f  ratio %.3f  (bar %s) %s" % (
            name, metric, o, t, ratio, row["bar"], "ok" if passed else "MISSED"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
