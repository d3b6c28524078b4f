"""The controller's own clock on the episode each worker holds.

A worker's watchdog (``episodes/deadline.py``) lives inside the worker, so it freezes with it (a
SIGSTOP, a stopped container, a machine swapped to a halt) and the session would wait forever.
Under xdist the controller watches from outside, on a thread of its own (a serial run is its own
worker: its output is pytest's capture while an episode runs, and it has no process to spare):

- with ``--vla-timeout``, a worker that has held one episode past the most its attempts may take
  (``HARD_FACTOR`` times the limit, per attempt) and ``FROZEN_GRACE_S`` more is ended as its
  backend ends one (``backends.py``: SIGKILL on this host, the connection closed to another;
  ``WorkerBackends`` hands the watch each worker's ender as it comes up); the episode becomes a
  crash record (an infrastructure error, not a policy failure);
- without it, once an episode has run far past the typical one (``STALL_FACTOR`` times the median
  so far, and at least ``STALL_FLOOR_S``), the progress output says which worker has been on
  which episode for how long.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pytest_vlaeval.episodes.deadline import HARD_FACTOR

STALL_FACTOR = 5.0
STALL_FLOOR_S = 30.0
"""An episode is far past the typical one beyond ``STALL_FACTOR`` times the median so far, and
never before ``STALL_FLOOR_S`` (short episodes vary a lot relative to their length)."""

STALL_UNKNOWN_S = 600.0
"""The bound while no episode has finished yet (the first ones also build their env)."""

FROZEN_GRACE_S = 10.0
"""Time past the worker's own hard stage: a worker that can still act ends a stuck episode itself
(with its own message); the controller ends only one that cannot."""

CHECK_INTERVAL_S = 1.0


@dataclass
class Held:
    """An episode a worker has started and not yet reported finished."""

    worker: str
    task: str
    seed: int
    since: float
    """``time.monotonic()`` when the controller heard the episode start."""

    def describe(self, now: float) -> str:
        return f"worker {self.worker} has been on {self.task} seed {self.seed} for {_seconds(now - self.since)}"


class EpisodeWatch:
    """Which worker holds which episode since when; ends frozen workers, names stalled episodes.

    ``notice`` prints one line; ``show_stalled`` gives the progress display the current stalled
    episodes (as lines), every check. Both are called from the watch's thread."""

    def __init__(
        self,
        limit_s: float | None,
        attempts: int,
        notice: Callable[[str], None],
        show_stalled: Callable[[list[str]], None],
    ) -> None:
        self.end_after_s = HARD_FACTOR * limit_s * attempts + FROZEN_GRACE_S if limit_s else None
        self.limit_s = limit_s
        self.notice = notice
        self.show_stalled = show_stalled
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._enders: dict[str, Callable[[], str]] = {}
        """How to end each worker: a callable that ends it and says how (its backend's ``end``)."""
        self._durations: list[float] = []
        self._announced: set[str] = set()
        self.ended: dict[str, str] = {}
        """Why the watch ended a worker, by worker id."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vlaeval-episode-watch", daemon=True)

    # -- what the controller hears ------------------------------------------------------

    def worker_ready(self, worker: str, end: Callable[[], str]) -> None:
        with self._lock:
            self._enders[worker] = end

    def started(self, nodeid: str, worker: str, task: str, seed: int) -> None:
        with self._lock:
            self._held[nodeid] = Held(worker, task, seed, time.monotonic())

    def finished(self, nodeid: str, *, completed: bool) -> None:
        """The episode's worker let go of it; ``completed`` ones set the typical duration."""
        with self._lock:
            held = self._held.pop(nodeid, None)
            if held is not None and completed:
                self._durations.append(time.monotonic() - held.since)

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            self.check(time.monotonic())

    def check(self, now: float) -> None:
        with self._lock:
            held = list(self._held.items())
            stall_s = self._stall_s()
        stalled = []
        for nodeid, episode in held:
            elapsed = now - episode.since
            if self.end_after_s is not None and elapsed > self.end_after_s:
                self._end(episode, now)
            elif elapsed > stall_s:
                stalled.append(episode.describe(now))
                if nodeid not in self._announced:
                    self._announced.add(nodeid)
                    self.notice(f"vlaeval: {stalled[-1]}, far past the typical episode ({self._typical()}); stuck?")
        self.show_stalled(stalled)

    def _end(self, episode: Held, now: float) -> None:
        end = self._enders.get(episode.worker)
        if end is None or episode.worker in self.ended:
            return
        assert self.limit_s is not None and self.end_after_s is not None
        why = (
            f"it held this episode {_seconds(now - episode.since)} without finishing, past {HARD_FACTOR:g}x "
            f"--vla-timeout={self.limit_s:g}s per attempt, and was ended by the controller (frozen?)"
        )
        self.ended[episode.worker] = why
        how = end()
        self.notice(f"vlaeval: {episode.describe(now)}, past {_seconds(self.end_after_s)}: {how}")

    def _stall_s(self) -> float:
        if not self._durations:
            return STALL_UNKNOWN_S
        return max(STALL_FLOOR_S, STALL_FACTOR * statistics.median(self._durations))

    def _typical(self) -> str:
        with self._lock:
            return f"median {_seconds(statistics.median(self._durations))}" if self._durations else "none finished yet"


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f}min"
