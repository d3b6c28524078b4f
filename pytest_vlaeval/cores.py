"""This process's share of the machine's cores among the session's xdist workers, and the variables
a user sizes torch's thread pool by; a leaf, for the env stacks and a policy beside them alike."""

from __future__ import annotations

import os

TORCH_POOL = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What torch sizes its intra-op pool by, when it is imported."""


def torch_pool_sized_by_user() -> bool:
    """Whether the user sized torch's pool: then no share of the cores replaces their count. Read
    before the session sets these (``cpu_share``), or where it never does (beside the env)."""
    return any(name in os.environ for name in TORCH_POOL)


def worker_count() -> int:
    """The session's xdist workers (1 when serial)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def worker_threads() -> int:
    """This process's share of its cores among the session's xdist workers (all of them when serial)."""
    return max(1, len(os.sched_getaffinity(0)) // worker_count())
