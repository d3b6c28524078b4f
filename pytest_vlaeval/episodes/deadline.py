"""Per-episode time limit (``--vla-timeout``): a hung simulator or policy server becomes an error.

Two stages, because a hang inside native code never returns to Python:

1. soft: SIGALRM raises ``EpisodeTimeout`` in the main thread at the limit, and again every
   ``REPEAT_S`` until the block is left. It interrupts anything that runs Python bytecode or a
   blocking system call (a policy, a policy factory, a socket wait). Code that swallows the
   exception and finishes anyway still ends in ``EpisodeTimeout``: a result past the limit never
   counts;
2. hard: under xdist, a watchdog thread ends the worker process ``HARD_FACTOR`` times later if
   the soft stage did not take. xdist records the crash as this episode's error (see
   ``controller/plugin.py``) and starts a fresh worker, which carries on with the remaining episodes.
   A serial run has no process to spare: there the watchdog says on stderr what is stuck, once.
"""

from __future__ import annotations

import contextlib
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
_session_stderr: int | None = None
"""The stderr the session started with (a duplicate taken while pytest's capture is suspended): the
capture that holds an episode's output does not reach it, so a stuck serial run says so while stuck."""

REPEAT_S = 1.0
"""Interval at which the soft stage raises again while the block has not been left."""


@contextmanager
def deadline(seconds: float | None, what: str, *, hard: bool) -> Iterator[None]:
    """Limit the block to ``seconds`` (no limit when None); ``hard`` arms the watchdog too."""
    if not seconds:
        yield
        return

    message = f"{what} exceeded --vla-timeout={seconds:g}s"
    expired = threading.Event()

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        expired.set()
        raise EpisodeTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
    done = threading.Event()
    threading.Thread(target=_watchdog, args=(done, seconds * HARD_FACTOR, what, hard), daemon=True).start()
    try:
        yield
    finally:
        done.set()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if expired.is_set():  # the block swallowed the timeout and finished late: not a result
        raise EpisodeTimeout(message)


def keep_session_stderr() -> None:
    """Remember the session's own stderr; call at configure time, before any episode runs."""
    global _session_stderr
    if _session_stderr is None:
        with contextlib.suppress(OSError):
            _session_stderr = os.dup(2)


def _watchdog(done: threading.Event, seconds: float, what: str, hard: bool) -> None:
    if done.wait(seconds):
        return
    if hard:
        sys.stderr.write(f"vlaeval: {what} is stuck past {seconds:g}s; ending this worker so xdist replaces it\n")
        sys.stderr.flush()
        os._exit(HARD_EXIT_CODE)
    message = (
        f"vlaeval: {what} is stuck past {seconds:g}s where --vla-timeout cannot interrupt it (native code, or "
        "code that swallows the timeout); a serial run cannot be rescued: run with -n 1 or more to have a stuck "
        "worker replaced\n"
    )
    os.write(2 if _session_stderr is None else _session_stderr, message.encode())
