#!/usr/bin/env python3
"""psrt's fused CUDA update against what a PyTorch user writes for the same job, in one run on
one GPU.

The job, per step: N gradients of P elements (dtype D) are averaged and torch.optim.SGD (lr 0.01,
momentum 0.9, weight decay 1e-4) updates fp32 weights and momentum with the mean.

  psrt     `psbench kernel --device cuda:I --workers N --params P --dtype D`: one launch of the
           fused kernel per step (its JSON line is kept whole under "psrt").
  PyTorch  acc.copy_(g[0]); acc.add_(g[j]) for j = 1..N-1; acc.mul_(1/N)   (fp32 accumulator,
           which is also w.grad), then torch.optim.SGD([w], ..., fused=True).step().

Both are timed the same way: every step between its own pair of CUDA events, all steps queued
back to back and synchronised once, warm-up steps dropped, the median of --iters reported; input
sets (N gradients, weights, momentum) rotate so that the rotation spans at least 4 x the L2 cache
(at least 2 sets, at most 256). The two tools alternate --runs times; the medians of their
per-run medians are compared. Prints one JSON object; speedup = torch_us_p50 / psrt_us_p50 (bar
for N=8, P=25.6M: >= 1.8). Exit status 1 when a tool fails, 0 otherwise (missing the bar is
reported, not an error).

Usage: perf/kernel_vs_pytorch.py [--psbench build/bin/psbench] [--workers 8] [--params 25600000]
                                 [--dtype fp32|bf16|fp16] [--device-index 0] [--iters 100]
                                 [--warmup 5] [--runs 3] [--json FILE]
"""
import argparse
import json
import math
import statistics
import subprocess
import sys

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-4
MIN_SETS, MAX_SETS = 2, 256


def run_psbench(args):
    cmd = [args.psbench, "kernel", "--device", f"cuda:{args.device_index}",
           "--workers", str(args.workers), "--params", str(args.params), "--dtype", args.dtype,
           "--iters", str(args.iters), "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"kernel_vs_pytorch: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stdout}{proc.stderr}")
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def time_on_stream(stream, warmup, iters, op):
    """GPU seconds of each of the last `iters` of warmup + iters calls of op(i), queued back to
    back on `stream` between their own event pairs and synchronised once (as psbench does)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(warmup + iters)]
    with torch.cuda.stream(stream):
        for i, (start, stop) in enumerate(events):
            start.record(stream)
            op(i)
            stop.record(stream)
    stream.synchronize()
    return [start.elapsed_time(stop) * 1e-3 for start, stop in events[warmup:]]


def run_torch(args, device):
    n, p, dtype = args.workers, args.params, DTYPES[args.dtype]
    gsize = torch.tensor([], dtype=dtype).element_size()
    set_bytes = p * (n * gsize + 3 * 4)  # gradients + weights, momentum and the fp32 accumulator
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    sets = min(max(math.ceil(4 * l2 / set_bytes), MIN_SETS), MAX_SETS)
    free, _ = torch.cuda.mem_get_info(device)
    while sets > 1 and sets * set_bytes > 0.8 * free:
        sets -= 1

    gen = torch.Generator(device=device).manual_seed(42)
    inputs = []
    for _ in range(sets):
        grads = [torch.randn(p, device=device, generator=gen).to(dtype) for _ in range(n)]
        w = torch.nn.Parameter(torch.randn(p, device=device, generator=gen))
        acc = torch.zeros(p, device=device)
        w.grad = acc  # what the optimiser reads; the accumulator is written in place
        opt = torch.optim.SGD([w], lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY,
                              fused=True)
        inputs.append((grads, acc, opt))

    def step(i):
        grads, acc, opt = inputs[i % sets]
        acc.copy_(grads[0])
        for g in grads[1:]:
            acc.add_(g)
        acc.mul_(1.0 / n)
        opt.step()

    stream = torch.cuda.Stream(device)
    times = time_on_stream(stream, args.warmup, args.iters, step)
    del inputs
    torch.cuda.empty_cache()  # give the memory back before psbench runs again
    return statistics.median(times), sets


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--psbench", default="build/bin/psbench", help="path to psbench")
    ap.add_argument("--workers", type=int, default=8, help="gradients per step (N)")
    ap.add_argument("--params", type=int, default=25_600_000, help="elements per step (P)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="gradient dtype")
    ap.add_argument("--device-index", type=int, default=0, help="CUDA device to run on")
    ap.add_argument("--iters", type=int, default=100, help="timed steps per run (median)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--runs", type=int, default=3, help="alternating runs of the two tools")
    ap.add_argument("--bar", type=float, default=1.8, help="speedup the issue asks for")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    if args.workers < 1 or args.params < 1 or args.iters < 1 or args.warmup < 0 or args.runs < 1:
        ap.error("--workers, --params, --iters and --runs must be >= 1, --warmup >= 0")
    if not torch.cuda.is_available():
        sys.exit("kernel_vs_pytorch: this PyTorch sees no CUDA device "
                 f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})")
    device = torch.device("cuda", args.device_index)
    torch.cuda.set_device(device)

    psrt_runs, torch_runs, psrt_lines, torch_sets = [], [], [], None
    for _ in range(args.runs):
        line = run_psbench(args)
        psrt_lines.append(line)
        psrt_runs.append(line["us_p50"])
        t, torch_sets = run_torch(args, device)
        torch_runs.append(t * 1e6)

    psrt_us = statistics.median(psrt_runs)
    torch_us = statistics.median(torch_runs)
    gsize = torch.tensor([], dtype=DTYPES[args.dtype]).element_size()
    must_move = args.params * (args.workers * gsize + 16)  # what GBps counts in psbench
    last = psrt_lines[-1]
    name = torch.cuda.get_device_name(device)
    result = {
        "bench": "kernel_vs_pytorch",
        "device_name": name,
        "psbench_device_name": last.get("device_name"),
        "cuda_driver": last.get("cuda_driver"),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "workers": args.workers,
        "params": args.params,
        "dtype": args.dtype,
        "iters": args.iters,
        "runs": args.runs,
        "psrt_us_p50": psrt_us,
        "torch_us_p50": torch_us,
        "psrt_us_runs": psrt_runs,
        "torch_us_runs": torch_runs,
        "speedup": torch_us / psrt_us,
        "bar": args.bar,
        "met": torch_us / psrt_us >= args.bar,
        "psrt_GBps": must_move / (psrt_us * 1e-6) / 1e9,
        "torch_GBps_same_bytes": must_move / (torch_us * 1e-6) / 1e9,
        "copy_GBps": last["copy_GBps"],
        "psrt_pct_of_copy": statistics.median(l["pct_of_copy"] for l in psrt_lines),
        "torch_sets": torch_sets,
        "psrt": last,
    }
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    if last.get("device_name") != name:
        print(f"kernel_vs_pytorch: warning: psbench ran on '{last.get('device_name')}', "
              f"torch on '{name}'", file=sys.stderr)


if __name__ == "__main__":
    main()
