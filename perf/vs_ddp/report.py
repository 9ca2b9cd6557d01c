#!/usr/bin/python3
"""The table and plot of perf/vs_ddp/run.sh's runs.jsonl.

    report.py runs.jsonl [--table table.md] [--plot vs_ddp.png]

One table per (set, rate, model): s/step, samples/s, the ratio of samples/s to the DDP run of
the same set, rate and model, the run's analytic bound in s/step and how close it came (bound /
s_per_step), MB through the busiest host link per step (both directions; the job's bytes over its steps,
timed and warm-up, plus one for the start's broadcast), TCP retransmissions, retransmission
timeouts (RTOs) and the packets the links' tbf dropped (out of the hosts / into them). Bounds, with
M the parameter bytes and B the link rate in bytes/s each way:
  DDP (ring all-reduce)         2(N-1)/N * M/B
  psrt, servers on own hosts    M/B * max(1, N/S)
  psrt, servers on worker hosts M/B * max(1, (N+S-2)/S)  (a host with a server sends its
                                pushes to the S-1 others and its slice to the N-1 others)
"""

import argparse
import json
import re
import sys
from collections import OrderedDict


def rate_bytes(rate):
    """tc's rate syntax (100mbit, 1gbit, 500kbit) in bytes/s; None for unshaped links."""
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate or "")
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def bound(r):
    b = rate_bytes(r["rate"])
    if b is None:
        return None
    if r.get("bench") == "pushpull":
        return r["size"] * r["keys"] / b * max(1.0, r["workers"] / r["servers"])
    m, n, s = r["param_bytes"], r["workers"], r["servers"]
    if r["engine"] == "ddp":
        return 2 * (n - 1) / n * m / b
    if r["placement"] == "own":
        return m / b * max(1.0, n / s)
    return m / b * max(1.0, (n + s - 2) / s)


def variant(r):
    v = r.get("variant", "default")
    return "" if v == "default" else f" [{v}]"


def name(r):
    if r["engine"] == "ddp":
        return f"torch DDP (gloo ring), N={r['workers']}"
    where = "own hosts" if r["placement"] == "own" else "worker hosts"
    return f"psrt {r['transport']}, N={r['workers']}, S={r['servers']} on {where}{variant(r)}"


def drops(r):
    """Retransmission timeouts and tbf drops out of / into the hosts, summed: "RTOs | out/in"."""
    d = r.get("tbf_drops")
    dropped = "{}/{}".format(sum(v[0] for v in d.values()), sum(v[1] for v in d.values())) \
        if d else "-"
    return "{} | {}".format(r.get("tcp_timeouts", "-"), dropped)


def pushpull_table(runs):
    text = []
    rows = [r for r in runs if r.get("bench") == "pushpull"]
    for (label, rate) in OrderedDict.fromkeys((r["set"], r["rate"]) for r in rows):
        rs = [r for r in rows if (r["set"], r["rate"]) == (label, rate)]
        text.append(f"\n{label}: psbench pushpull, links {rate}\n")
        text.append("| transport | N | S | tensor bytes | round p50 s | round p99 s | "
                    "bound s | p50/bound | TCP retrans | RTOs | tbf drops out/in |")
        text.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            bd = bound(r)
            text.append("| {} | {} | {} | {} | {:.3f} | {:.3f} | {} | {} | {} | {} |".format(
                r["transport"] + variant(r), r["workers"], r["servers"], r["size"] * r["keys"],
                r["round_us_p50"] / 1e6, r["round_us_p99"] / 1e6,
                f"{bd:.3f}" if bd else "-", f"{r['round_us_p50'] / 1e6 / bd:.2f}" if bd else "-",
                r.get("tcp_retrans", "-"), drops(r)))
    return text


def tables(runs):
    groups = OrderedDict()
    for r in runs:
        if r.get("failed") or r.get("bench"):
            continue
        groups.setdefault((r["set"], r["rate"], r["model"]), []).append(r)
    text = pushpull_table(runs)
    for (label, rate, model), rs in groups.items():
        ddp = [r for r in rs if r["engine"] == "ddp"]
        base = ddp[-1]["samples_per_s"] if ddp else None
        m = rs[0]["param_bytes"]
        text.append(f"\n{label}: {model} ({m / 1e6:.2f} MB of fp32 parameters, batch "
                    f"{rs[0]['batch']}), links {rate}, {rs[0]['steps']} timed steps\n")
        text.append("| run | s/step | samples/s | vs DDP | bound s/step | bound/actual | "
                    "busiest link MB/step | TCP retrans | RTOs | tbf drops out/in |")
        text.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            bd = bound(r)
            per_step = max(r["link_bytes"].values()) / (r["steps"] + r["warmup"] + 1) / 1e6 \
                if r.get("link_bytes") else float("nan")
            text.append("| {} | {:.3f} | {:.1f} | {} | {} | {} | {:.1f} | {} | {} |".format(
                name(r), r["s_per_step"], r["samples_per_s"],
                f"{r['samples_per_s'] / base:.2f}x" if base else "-",
                f"{bd:.3f}" if bd else "-",
                f"{bd / r['s_per_step']:.2f}" if bd else "-",
                per_step, r.get("tcp_retrans", "-"), drops(r)))
    return "\n".join(text).lstrip() + "\n", groups


def plot(groups, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4.5), squeeze=False)
    for ax, ((label, rate, model), rs) in zip(axes[0], groups.items()):
        names = [name(r).replace(", ", "\n", 1) for r in rs]
        ax.bar(range(len(rs)), [r["samples_per_s"] for r in rs], color=[
            "tab:gray" if r["engine"] == "ddp" else "tab:blue" for r in rs])
        bounds = [bound(r) for r in rs]
        if all(bounds):
            ax.scatter(range(len(rs)), [r["workers"] * r["batch"] / b for r, b in zip(rs, bounds)],
                       marker="_", s=600, color="tab:red", label="analytic bound")
            ax.legend()
        ax.set_xticks(range(len(rs)), names, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("samples/s (all workers)")
        ax.set_title(f"{model}, links {rate} ({label})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs")
    ap.add_argument("--table")
    ap.add_argument("--plot")
    a = ap.parse_args()
    with open(a.runs) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    text, groups = tables(runs)
    if a.table:
        with open(a.table, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if a.plot and groups:
        plot(groups, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
