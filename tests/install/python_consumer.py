"""docs/python-api.md's example, run by install_test.sh with the installed package under the
installed psrun: exact sums of two workers' gradients."""

import numpy as np

import psrt

w = psrt.Worker.from_env()
weights, grad = np.zeros(1000, np.float32), np.ones(1000, np.float32)
w.set_optimizer(lr=0.5)
w.init(7, weights)
w.pull(7, weights).wait()
for _ in range(4):
    w.push_pull(7, grad, weights).wait()  # the mean gradient is 1: -0.5 a round
ok = bool((weights == -2.0).all())
print(f"python rank {w.rank}: weights {weights[0]} {'ok' if ok else 'WRONG'}", flush=True)
w.shutdown()
raise SystemExit(0 if ok else 1)
