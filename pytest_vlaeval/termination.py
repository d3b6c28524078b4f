"""Termination signals during a session: how CI runners and batch schedulers stop a job (SIGTERM)
and what a closed terminal sends (SIGHUP).

The first one interrupts the session as Ctrl-C does, in the controller and in every worker:
finished episodes are kept, the summary says the run is partial and interrupted, and the completion
command is printed. A second one ends the process at once. A signal the session was started
ignoring (``nohup``) stays ignored. While the run's files are written at the session's end
(``deferred``), a signal waits for the write to finish: the files stay whole, and the session then
ends as interrupted.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar

TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _State:
    """The process's one deferral (the controller's final write)."""

    deferring: ClassVar[bool] = False
    received: ClassVar[list[str]] = []


def interrupt_on_termination() -> Callable[[], None]:
    """Install the handlers (in the main thread only); returns what restores the previous ones."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signum: signal.getsignal(signum) for signum in TERMINATION_SIGNALS}
    handled = [signum for signum, handler in previous.items() if handler is not signal.SIG_IGN]

    def interrupt(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if _State.deferring and not _State.received:
            _State.received.append(name)  # the final write goes on; the session ends as interrupted after it
            return
        for each in handled:
            signal.signal(each, signal.SIG_DFL)
        raise KeyboardInterrupt(f"{name} received")

    for signum in handled:
        signal.signal(signum, interrupt)

    def restore() -> None:
        for signum in handled:
            if previous[signum] is not None:  # None: set outside Python, nothing to restore
                signal.signal(signum, previous[signum])

    return restore


@contextmanager
def deferred() -> Iterator[list[str]]:
    """Hold a first termination signal while the block runs; yields the list that then names it."""
    _State.deferring, _State.received = True, []
    try:
        yield _State.received
    finally:
        _State.deferring = False
