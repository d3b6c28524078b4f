"""The run's latest record per episode: the one copy that the canonical files, both gates, the
ledger's attempt numbers, reruns and progress all read.

It is fed this session's records as they arrive, and ``catch_up`` reads only what other
sessions appended to their logs since its last read (a byte offset per log), so keeping it
current costs what is new, never the whole run again. The latest attempt of an episode is the
one made last (the records' time); ties go to the one read last.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.record import FAILURE, EpisodeRecord
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.runfiles import loads

Key = tuple[str, int]


class LatestRecords(Mapping[Key, EpisodeRecord]):
    """``(task, seed) -> EpisodeRecord``, the latest attempt of each episode of the run."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self._latest: dict[Key, EpisodeRecord] = {}
        self._failed_once: set[Key] = set()
        self._read_up_to: dict[Path, tuple[int, int]] = {}
        """Per log: the byte offset after its last complete line read, and that line's number."""

    @classmethod
    def read(cls, run_dir: RunDir) -> LatestRecords:
        """Every record already in the run's logs."""
        records = cls(run_dir)
        records.catch_up()
        return records

    def __getitem__(self, key: Key) -> EpisodeRecord:
        return self._latest[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._latest)

    def __len__(self) -> int:
        return len(self._latest)

    def failed_once(self, key: Key) -> bool:
        """Whether any attempt of the episode, in any session, was a completed failure."""
        return key in self._failed_once

    def outcomes(self) -> dict[str, dict[int, bool]]:
        """The completed episodes, task -> seed -> success: what the gate judges."""
        found: dict[str, dict[int, bool]] = {}
        for (task, seed), record in self._latest.items():
            if record.completed:
                found.setdefault(task, {})[seed] = bool(record.success)
        return found

    def add(self, record: EpisodeRecord) -> None:
        """A record of this session (the caller keeps it out of the logs ``catch_up`` reads)."""
        if record.outcome == FAILURE:
            self._failed_once.add(record.key)
        current = self._latest.get(record.key)
        if current is None or record.time >= current.time:
            self._latest[record.key] = record

    def catch_up(self, skip: Path | None = None) -> None:
        """Read what the run's logs gained since the last read (``skip``: this session's own log).

        A torn last line (a writer mid-append, or a crash mid-write) is not a record yet: it is
        read again, whole, next time. A damaged complete line is refused, naming the file and
        line: guessing would silently drop or invent an episode, and removing the line (the
        episode then counts as never run) is a decision for the user.
        """
        for path in self.run_dir.logs():
            if path != skip:
                self._read_new_lines(path)

    def _read_new_lines(self, path: Path) -> None:
        offset, number = self._read_up_to.get(path, (0, 0))
        try:
            with path.open("rb") as log:
                log.seek(offset)
                new = log.read()
        except OSError as exc:
            raise SpecError(
                f"{path} is among the run's episode logs but cannot be read ({exc.strerror or exc}): remove it"
            ) from None
        complete = new[: new.rfind(b"\n") + 1]
        for line in complete.splitlines():
            number += 1
            self.add(_parse(line, path, number))
        self._read_up_to[path] = (offset + len(complete), number)


def _parse(line: bytes, path: Path, number: int) -> EpisodeRecord:
    try:
        return EpisodeRecord.from_dict(loads(line.decode("utf-8", errors="replace")))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SpecError(
            f"{path} line {number} is not an episode record ({type(exc).__name__}: {exc}); "
            f"inspect it, then remove it with: sed -i '{number}d' '{path}' "
            f"(its episode then counts as never run; --vla-resume runs it again)"
        ) from None
