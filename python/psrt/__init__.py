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
DistributedOptimizer for PyTorch models; psrt.allreduce and psrt.broadcast are collectives for
metrics (psrt/collectives.py); psrt.request_checkpoint asks the job for a checkpoint (psrun
--checkpoint-dir; psrt/checkpoints.py). A script that ends without shutdown() still leaves the job: the
process's exit does it. psrt.__version__ is the version `psrun --version` prints.
"""

from psrt._torch_version import found_torch_version as _found_torch_version
from psrt._version import __version__, built_torch_version as _built_torch_version


def _check_torch():
    """Refuses to load against a torch other than the one this psrt was built against."""
    found = _found_torch_version()
    if found is not None and found != _built_torch_version:
        raise ImportError(
            f"psrt {__version__} was built against torch {_built_torch_version}, but this "
            f"interpreter finds torch {found}: rebuild psrt for it (pip install "
            "--no-build-isolation --force-reinstall . in psrt's source tree, or make build), "
            f"or use the torch {_built_torch_version} it was built with"
        )


_check_torch()

from psrt._core import Error, ErrorCode, Handle, Worker, key_of  # noqa: E402
from psrt.collectives import allreduce, broadcast, default_worker  # noqa: E402
from psrt.checkpoints import request_checkpoint  # noqa: E402

__all__ = ["Error", "ErrorCode", "Handle", "Worker", "key_of", "allreduce", "broadcast",
           "default_worker", "request_checkpoint", "__version__"]
