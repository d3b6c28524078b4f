"""The run's latest record per episode: the one copy that the canonical files, both gates, the
ledger's attempt numbers, reruns and progress all read.

It is fed this session's records as they arrive, and ``catch_up`` reads only what other
sessions appended to their logs since its last read (a byte offset per log), so keeping it
current costs what is new, never the whole run again. Logs are read line by line, so memory
follows the run's episodes, not the size of its logs.

Which attempt is the latest is decided by the attempt number, which the run controls: a session
numbers each record one past the latest attempt it knows of (``controller.ledger``), so a rerun is
always numbered past what it reran, whatever any clock says. Only attempts of one number (made by
sessions that did not know of each other) are ordered by their time; ties go to the one read last.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import command_line, terminal_safe
from pytest_vlaeval.results.record import FAILURE, MAX_LINE_BYTES, EpisodeRecord, parse_record
from pytest_vlaeval.results.rundir import RunDir

Key = tuple[str, int]


@dataclass
class _LogPosition:
    """How far a log has been read: the byte offset after its last complete line read, and that
    line's number."""

    offset: int = 0
    line: int = 0


class LatestRecords(Mapping[Key, EpisodeRecord]):
    """``(task, seed) -> EpisodeRecord``, the latest attempt of each episode of the run."""

    def __init__(self, run_dir: RunDir, universe: Iterable[Key] | None = None) -> None:
        self.run_dir = run_dir
        self.universe = None if universe is None else frozenset(universe)
        """The episodes kept (all when None): a received log may hold any number of others."""
        self.outside = 0
        """Records read of episodes outside ``universe``: counted, not kept."""
        self._latest: dict[Key, EpisodeRecord] = {}
        self._failed_once: set[Key] = set()
        self._read_up_to: dict[Path, _LogPosition] = {}
        self.skipped: list[str] = []
        """One line per log line passed over as too long to be a record (``skipped_line``)."""

    @classmethod
    def read(cls, run_dir: RunDir, universe: Iterable[Key] | None = None) -> LatestRecords:
        """Every record already in the run's logs (of the episodes of ``universe``, when given)."""
        records = cls(run_dir, universe)
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
        if self.universe is not None and record.key not in self.universe:
            self.outside += 1
            return
        if record.outcome == FAILURE:
            self._failed_once.add(record.key)
        current = self._latest.get(record.key)
        if current is None or _order(record) >= _order(current):
            self._latest[record.key] = record

    def catch_up(self, skip: Path | None = None) -> None:
        """Read what the run's logs gained since the last read (``skip``: this session's own log).

        A torn last line (a writer mid-append, or a crash mid-write) is not a record yet: it is
        read again, whole, next time. A damaged complete line is refused, naming the file and
        line: guessing would silently drop or invent an episode, and removing the line (the
        episode then counts as never run) is a decision for the user. A line longer than
        ``MAX_LINE_BYTES`` is no record any session wrote (a writer keeps each below it), so it
        drops no episode: it is passed over unread and named in ``skipped``.
        """
        for path in self.run_dir.logs():
            if path != skip:
                self._read_new_lines(path)

    def _read_new_lines(self, path: Path) -> None:
        position = self._read_up_to.setdefault(path, _LogPosition())
        try:
            with path.open("rb") as log:
                log.seek(position.offset)
                for line in whole_lines(log, position.line):
                    record = None if line.text is None else _parse(line.text, path, line.number)
                    position.offset, position.line = line.end, line.number
                    if record is None:
                        self.skipped.append(skipped_line(path, line.number))
                    else:
                        self.add(record)
        except OSError as exc:
            raise SpecError(
                f"{path} is among the run's episode logs but cannot be read ({exc.strerror or exc}): remove it"
            ) from None


READ_BYTES = 1 << 20
"""The most of a line read at a time until it is known to be no longer than ``MAX_LINE_BYTES``."""


@dataclass(frozen=True)
class LogLine:
    number: int
    end: int
    """The byte offset just after it."""
    text: bytes | None
    """The line, its newline included; None for one longer than ``MAX_LINE_BYTES``, never read whole."""


def whole_lines(log: BinaryIO, after_line: int = 0) -> Iterator[LogLine]:
    """The complete lines of an episode log from where ``log`` stands, numbered on from
    ``after_line``. A torn last line (a writer mid-append) is left for the next read. A line is read
    ``READ_BYTES`` at a time until its end is found, and only then whole, when it is no longer than
    ``MAX_LINE_BYTES``; a longer one (a torn tail of gigabytes included: no writer appends to it)
    comes with no text, so a line of any length costs at most ``READ_BYTES`` of memory beyond a record's."""
    offset = log.tell()
    for number in itertools.count(after_line + 1):
        text = log.readline(READ_BYTES)
        if text.endswith(b"\n"):
            offset += len(text)
            yield LogLine(number, offset, text)
            continue
        if len(text) < READ_BYTES:
            return  # the end of the log: nothing more, or a torn last line
        length, ended = _measure_rest(log, len(text))
        if length > MAX_LINE_BYTES:
            whole = None
        elif ended:
            log.seek(offset)
            whole = log.read(length)
        else:
            return  # a torn last line, read again whole next time
        offset += length
        yield LogLine(number, offset, whole)
        if not ended:
            return


def _measure_rest(log: BinaryIO, length: int) -> tuple[int, bool]:
    """The length of a line ``length`` bytes of which were read, reading the rest a piece at a
    time without keeping it, and whether it ends (False: the log ends first)."""
    while True:
        piece = log.readline(READ_BYTES)
        length += len(piece)
        if piece.endswith(b"\n"):
            return length, True
        if len(piece) < READ_BYTES:
            return length, False


def skipped_line(path: Path, number: int) -> str:
    """What a reader says of a line of ``path`` passed over as too long to be a record."""
    return terminal_safe(
        f"{path} line {number} passed over: longer than {MAX_LINE_BYTES // 2**20} MiB, so no episode record "
        "(none is written so long); the log's other lines are read"
    )


def _order(record: EpisodeRecord) -> tuple[int, datetime]:
    """What makes one attempt of an episode later than another: its number, then its time."""
    return record.attempt, record.instant


def _parse(line: bytes, path: Path, number: int) -> EpisodeRecord:
    try:
        return parse_record(line.decode("utf-8", errors="replace"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _damaged_line(path, number, f"{type(exc).__name__}: {exc}") from None


def _damaged_line(path: Path, number: int, why: str) -> SpecError:
    """The refusal of a damaged line of an episode log, naming it and the command that removes it."""
    problem = terminal_safe(f"{path} line {number} is not an episode record ({why})")
    return SpecError(
        f"{problem}; inspect it, then remove it with: {command_line(['sed', '-i', f'{number}d', str(path)])} "
        f"(its episode then counts as never run; --vla-resume runs it again)"
    )
