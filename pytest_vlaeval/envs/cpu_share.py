"""Each xdist worker's share of the machine's cores, for the thread pools of the libraries it loads.

Every library that computes on the CPU starts a thread per core by default: torch and the OpenMP,
MKL and OpenBLAS pools under it, and Mesa's lavapipe. N workers on one machine then run N threads
per core and spend their time switching. Measured on a 16-core GPU machine (MIKASA, GPU rendering,
CPU physics): 8 workers stepped in 224 ms where one took 21 ms, and 40 ms once each worker's pools
held 2 threads. A worker gets the cores it may use divided by the session's worker count (at least
one); a serial session keeps the libraries' defaults, and a variable the user set wins.

A worker that runs a torch policy beside the env (``distribute.policy_placement``) leaves torch's
own pool at its default, the one ``lerobot-eval`` and a policy server run with: a convolution on
the CPU rounds differently on another number of threads, so the share would make an episode's
actions depend on ``-n``; the policy takes its share itself where that keeps its actions
(``lerobot.threads``). Its OpenMP threads sleep when idle (``OMP_WAIT_POLICY=PASSIVE``)
instead of spinning against the other workers'; measured on two cores, two workers of two threads
each then spent at most 7% more CPU than of one, where spinning took four times as much.
"""

from __future__ import annotations

import os
import sys

from pytest_vlaeval.cores import TORCH_POOL, torch_pool_sized_by_user, worker_count, worker_threads

THREAD_VARIABLES = (*TORCH_POOL, "OPENBLAS_NUM_THREADS")
IDLE_THREADS = ("OMP_WAIT_POLICY", "PASSIVE")


def share_cpu_threads(policy_beside: bool = False) -> None:
    """In an xdist worker, size the math libraries' thread pools to the worker's share of the cores;
    with ``policy_beside`` (a torch policy runs in this worker), all but torch's."""
    if worker_count() <= 1:
        return
    user_set = torch_pool_sized_by_user()
    share = worker_threads()
    for name in THREAD_VARIABLES:
        if not (policy_beside and name in TORCH_POOL):
            os.environ.setdefault(name, str(share))
    if policy_beside:
        os.environ.setdefault(*IDLE_THREADS)
        return
    torch = sys.modules.get("torch")  # already imported (a conftest): its pool is sized already
    if torch is not None and not user_set:
        torch.set_num_threads(share)
