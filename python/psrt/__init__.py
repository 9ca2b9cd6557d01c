"""psrt: the worker API of the psrt parameter-server runtime (include/psrt/psrt.h), in Python.

A job is started by psrun, which runs a scheduler, the servers and N copies of your program:

    psrun -n 4 -s 2 -- /usr/bin/python3 train.py

    import numpy as np, psrt
    w = psrt.Worker.from_env()
    weights, grad = np.zeros(1000, np.float32), np.ones(1000, np.float32)
    w.set_optimizer(lr=0.1, momentum=0.9)
    w.init(7, weights)                      # the first init of key 7 in the job wins
    w.pull(7, weights).wait()               # everyone starts from the same values
    w.push_pull(7, grad, weights).wait()    # weights = the result of this round
    w.shutdown()

Tensors (torch.Tensor, NumPy arrays, any buffer-protocol object) are used in place: psrt sends
from and receives into their memory and keeps them alive until the operation is over.
Errors raise psrt.Error, whose .code is a psrt.ErrorCode. psrt.torch holds the
DistributedOptimizer for PyTorch models.
"""

from psrt._core import Error, ErrorCode, Handle, Worker, key_of

__all__ = ["Error", "ErrorCode", "Handle", "Worker", "key_of"]
