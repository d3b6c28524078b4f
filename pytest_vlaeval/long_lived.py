"""Objects a process keeps for its whole life, kept out of Python's cyclic collector.

Importing torch, a simulator or a policy stack leaves hundreds of thousands of objects that live as
long as the process, and every full collection walks all of them: a LeRobot checkpoint's stack made
seven while it was imported in an xdist worker (0.75 s together), then three more as the worker
ended (pytest's own at unconfigure and the interpreter's at exit, 0.2-0.3 s each), on two cores. After one
collection, so that no garbage is kept with them, they move to the collector's permanent generation
(``gc.freeze``): later collections walk only what episodes create. Nothing computed changes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_survivors() -> None:
    """Collect once, then keep every object that survived out of later collections."""
    gc.collect()
    gc.freeze()


@contextmanager
def built_for_life() -> Iterator[None]:
    """What is built inside lives as long as the process: no collection while it is built (its
    imports would trigger several, each walking everything imported so far), one after it, then
    none that walks it again. A build that raises freezes nothing (what it left is garbage)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        freeze_survivors()
    finally:
        if enabled:
            gc.enable()
