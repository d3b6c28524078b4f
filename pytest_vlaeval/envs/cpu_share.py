"""Each xdist worker's share of the machine's cores, for the thread pools of the libraries it loads.

Every library that computes on the CPU starts a thread per core by default: torch and the OpenMP,
MKL and OpenBLAS pools under it, and Mesa's lavapipe. N workers on one machine then run N threads
per core and spend their time switching. Measured on a 16-core GPU machine (MIKASA, GPU rendering,
CPU physics): 8 workers stepped in 224 ms where one took 21 ms, and 40 ms once each worker's pools
held 2 threads. A worker gets the cores it may use divided by the session's worker count (at least
one); a serial session keeps the libraries' defaults, and a variable the user set wins.
"""

from __future__ import annotations

import os
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_threads() -> int:
    """This process's share of its cores among the session's xdist workers (all of them when serial)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, len(os.sched_getaffinity(0)) // max(1, workers))


def share_cpu_threads() -> None:
    """In an xdist worker, size the math libraries' thread pools to the worker's share of the cores."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1:
        return
    user_set = "OMP_NUM_THREADS" in os.environ
    share = worker_threads()
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(share))
    torch = sys.modules.get("torch")  # already imported (a conftest): its pool is sized already
    if torch is not None and not user_set:
        torch.set_num_threads(share)
