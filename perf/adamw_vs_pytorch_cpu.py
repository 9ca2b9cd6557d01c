#!/usr/bin/env python3
"""psrt's fused AdamW update on the CPU against what a PyTorch user writes for the same job, in one
run on one machine.

The job, per step: N fp32 gradients of P elements are averaged and torch.optim.AdamW (lr 1e-2,
betas 0.9/0.999, eps 1e-8, weight decay 1e-2) updates fp32 weights and its two moments.

  psrt     `psbench kernel --optimizer adamw --workers N --params P --threads T`: one fused pass
           per step (its JSON line is kept whole under "psrt"; its pct_of_copy is the bandwidth
           of the update, counting N gradient reads + w, m, v read and written, against a memcpy
           on the same threads: the memory-traffic bound).
  PyTorch  acc.copy_(g[0]); torch._foreach_add_([acc], [g[j]]) for j = 1..N-1; acc.mul_(1/N)
           (acc is w.grad), then torch.optim.AdamW([w], ..., foreach=True).step(), with
           torch.set_num_threads(T).

Both report the median of --iters steps after --warmup; the two tools alternate --runs times and
the medians of their per-run medians are compared. Prints one JSON object; speedup =
torch_us_p50 / psrt_us_p50 (bar for N=8, P=25.6M: >= 2) and pct_of_copy (bar >= 70).

Usage: perf/adamw_vs_pytorch_cpu.py [--psbench build/bin/psbench] [--workers 8]
                                    [--params 25600000] [--threads 1] [--iters 20] [--warmup 3]
                                    [--runs 3] [--json FILE]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.999), 1e-8, 1e-2


def run_psbench(args):
    cmd = [args.psbench, "kernel", "--optimizer", "adamw", "--workers", str(args.workers),
           "--params", str(args.params), "--threads", str(args.threads), "--iters",
           str(args.iters), "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"adamw_vs_pytorch_cpu: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stdout}{proc.stderr}")
    return json.loads([l for l in proc.stdout.splitlines() if l.startswith("{")][-1])


def run_torch(args):
    torch.set_num_threads(args.threads)
    n, p = args.workers, args.params
    grads = [torch.rand(p) - 0.5 for _ in range(n)]
    w = torch.zeros(p, requires_grad=True)
    acc = torch.zeros(p)
    w.grad = acc
    opt = torch.optim.AdamW([w], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                            foreach=True)
    times = []
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        acc.copy_(grads[0])
        for g in grads[1:]:
            torch._foreach_add_([acc], [g])
        acc.mul_(1.0 / n)
        opt.step()
        t = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(t)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--psbench", default="build/bin/psbench")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--params", type=int, default=25_600_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    psrt_runs, torch_runs = [], []
    for _ in range(args.runs):
        psrt_runs.append(run_psbench(args))
        torch_runs.append(run_torch(args))
    psrt_us = statistics.median(r["us_p50"] for r in psrt_runs)
    torch_us = statistics.median(torch_runs)
    out = {
        "bench": "adamw_vs_pytorch_cpu", "workers": args.workers, "params": args.params,
        "threads": args.threads, "runs": args.runs, "iters": args.iters,
        "psrt_us_p50": psrt_us, "torch_us_p50": torch_us, "speedup": torch_us / psrt_us,
        "pct_of_copy": statistics.median(r["pct_of_copy"] for r in psrt_runs),
        "torch_version": torch.__version__, "psrt": psrt_runs[-1],
    }
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
