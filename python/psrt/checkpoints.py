"""psrt.request_checkpoint: a job checkpoint on demand (docs/checkpoints.md), from Python.

    # psrun --checkpoint-dir /shared/ckpt --max-restarts 2 -- python3 train.py
    w = psrt.default_worker()
    start = w.resume_round                   # 0 for a fresh job: the rounds already trained
    for step in range(start, steps):
        if step == 100:
            psrt.request_checkpoint(step + 2)   # servers save round 102, weights and moments
        ...

The servers write every slice of round `round` (the weights after that round, with their
optimizer state) into psrun's --checkpoint-dir and keep it; a job restarted from that directory
(psrun --max-restarts, or psrun --checkpoint-dir DIR again) resumes there, and
Worker.resume_round says which round. Ask before this worker pushes round `round` - 1: in a sync
job, `round` >= the rounds it has pushed + 2 (at step s, counting from 0 in a fresh job: s + 2).
"""

from psrt.collectives import default_worker

__all__ = ["request_checkpoint"]


def request_checkpoint(round, worker=None):
    """Asks the job for a checkpoint of round `round` (psrt::Worker::request_checkpoint).
    Non-blocking. psrt.Error (INVALID_ARGUMENT) when the job has no --checkpoint-dir."""
    w = default_worker() if worker is None else worker
    w.request_checkpoint(int(round))
