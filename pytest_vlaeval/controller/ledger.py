"""The controller's bookkeeping, without pytest: which episodes this session scheduled, which
have settled, each record's attempt number, crash retries, and what the session's end makes of
the episodes that never reported. ``controller.plugin`` feeds it from pytest's hooks."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable

from pytest_vlaeval.results.latest import Key, LatestRecords
from pytest_vlaeval.results.record import ERROR, MAX_ATTEMPT, EpisodeRecord


class Ledger:
    def __init__(self, latest: LatestRecords, retries: int) -> None:
        self.latest = latest
        """The latest record of every episode of the run (earlier and concurrent sessions' included)."""
        self.retries = retries
        self.scheduled: dict[str, Key] = {}
        self.reported: set[str] = set()
        self._pending_by_task: dict[str, set[str]] = defaultdict(set)
        self._crash_retries: dict[str, int] = defaultdict(int)

    def schedule(self, episodes: Iterable[tuple[str, Key]]) -> list[Key]:
        """Note ``(nodeid, key)`` pairs as scheduled; returns the keys not seen before."""
        new = []
        for nodeid, key in episodes:
            if nodeid not in self.scheduled:
                self.scheduled[nodeid] = key
                self._pending_by_task[key[0]].add(nodeid)
                new.append(key)
        return new

    def expects(self, nodeid: str) -> bool:
        """Whether a report for ``nodeid`` still settles an episode of this session."""
        return nodeid in self.scheduled and nodeid not in self.reported

    def number(self, record: EpisodeRecord) -> EpisodeRecord:
        """``record`` as the next attempt of its episode, now its latest. Past ``MAX_ATTEMPT`` (a
        received log's) it keeps that number, which no log refuses, and its time orders it after
        the one before, as between sessions that did not know of each other."""
        previous = self.latest.get(record.key)
        record = dataclasses.replace(record, attempt=min(previous.attempt + 1, MAX_ATTEMPT) if previous else 1)
        self.latest.add(record)
        return record

    def retry_crash(self, nodeid: str) -> bool:
        """Whether a crashed episode gets another attempt (``--vla-retries``), counting it."""
        if self._crash_retries[nodeid] >= self.retries:
            return False
        self._crash_retries[nodeid] += 1
        return True

    def settle(self, nodeid: str) -> bool:
        """The episode has its final record; True when it was its task's last pending one."""
        self.reported.add(nodeid)
        pending = self._pending_by_task[self.scheduled[nodeid][0]]
        pending.discard(nodeid)
        return not pending

    def unsettled(self) -> int:
        """How many scheduled episodes have no final record yet (``len(unreported())`` without its
        sort, for a check at every settled episode)."""
        return len(self.scheduled) - len(self.reported)

    def unreported(self) -> list[str]:
        """Scheduled episodes no report settled, in node-id order."""
        return sorted(set(self.scheduled) - self.reported)

    def errored(self) -> bool:
        """Whether an episode settled in this session ended in an error (an incomplete run never passes)."""
        settled = {self.scheduled[nodeid] for nodeid in self.reported}
        return any(self.latest[key].outcome == ERROR for key in settled if key in self.latest)
