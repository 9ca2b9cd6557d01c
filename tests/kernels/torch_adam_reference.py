"""torch.optim.Adam / AdamW (foreach=False) step by step, for tests/kernels/fused_adam_test.cc.

Usage: torch_adam_reference.py DIR SPEC...   SPEC = ALGORITHM(adam|adamw),WEIGHT_DECAY,N,
       DTYPE(f32|f16|bf16),MEAN(0|1),STEPS,COUNT

One torch import for every SPEC (importing torch takes seconds). Writes DIR/<SPEC>.bin
(little-endian fp32 throughout): the initial weights (COUNT), then per step the lr (1 value), the N gradients as fp32 (each exactly a DTYPE value, N * COUNT) and the weights after
torch's step (COUNT). The aggregation is the kernel's: g = g_0 + g_1 + ... in fp32, in that order,
times float(1/N) for the mean; betas, eps and lr are fp32 values, as the servers' config holds.
"""
import sys

import numpy as np
import torch


def run(out, algorithm, wd, n, dtype, mean, steps, count):
    wd, n, mean = float(np.float32(float(wd))), int(n), mean == "1"
    steps, count = int(steps), int(count)
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator().manual_seed(1234)
    param = torch.nn.Parameter(torch.rand(count, generator=gen, dtype=torch.float32) * 2 - 1)
    kind = torch.optim.Adam if algorithm == "adam" else torch.optim.AdamW
    opt = kind([param], lr=f32(1e-2), betas=(f32(0.9), f32(0.999)), eps=f32(1e-8),
               weight_decay=wd, foreach=False)
    scale = torch.tensor(1.0 / n if mean else 1.0, dtype=torch.float32)
    chunks = [param.detach().numpy().astype("<f4").tobytes()]
    for t in range(steps):
        lr = f32(1e-2 * (0.5 + 0.5 * np.cos(np.pi * t / steps)) + 1e-4)  # lr changes
        for group in opt.param_groups:
            group["lr"] = lr
        grads = [(torch.randn(count, generator=gen) * (1 + j)).to(torch_dtype).float()
                 for j in range(n)]
        g = grads[0].clone()
        for x in grads[1:]:
            g = g + x
        param.grad = g * scale
        opt.step()
        chunks.append(np.array([lr], dtype="<f4").tobytes())
        chunks += [x.numpy().astype("<f4").tobytes() for x in grads]
        chunks.append(param.detach().numpy().astype("<f4").tobytes())
    with open(out, "wb") as f:
        f.write(b"".join(chunks))


def f32(x):
    return float(np.float32(x))


for spec in sys.argv[2:]:
    run(f"{sys.argv[1]}/{spec}.bin", *spec.split(","))
