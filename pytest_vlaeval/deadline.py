"""Per-episode time limit (``--vla-timeout``): a hung simulator or policy server becomes an error.

Two stages, because a hang inside native code never returns to Python:

1. soft: SIGALRM raises ``EpisodeTimeout`` in the main thread at the limit. It interrupts
   anything that runs Python bytecode or a blocking system call (a policy, a socket wait);
2. hard: under xdist, a watchdog thread ends the worker process ``HARD_FACTOR`` times later if
   the soft stage did not take. xdist records the crash as this episode's error (see
   ``controller.py``) and starts a fresh worker, which carries on with the remaining episodes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from pytest_vlaeval.errors import EpisodeTimeout

HARD_FACTOR = 2.0
HARD_EXIT_CODE = 75


@contextmanager
def deadline(seconds: float | None, what: str, *, hard: bool) -> Iterator[None]:
    """Limit the block to ``seconds`` (no limit when None); ``hard`` arms the watchdog too."""
    if not seconds:
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise EpisodeTimeout(f"{what} exceeded --vla-timeout={seconds:g}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    done = threading.Event()
    if hard:
        threading.Thread(target=_watchdog, args=(done, seconds * HARD_FACTOR, what), daemon=True).start()
    try:
        yield
    finally:
        done.set()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _watchdog(done: threading.Event, seconds: float, what: str) -> None:
    if not done.wait(seconds):
        sys.stderr.write(f"vlaeval: {what} is stuck past {seconds:g}s; ending this worker so xdist replaces it\n")
        sys.stderr.flush()
        os._exit(HARD_EXIT_CODE)
