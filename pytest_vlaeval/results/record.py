"""The per-episode record: what a worker sends to the controller and what the store keeps.

Records travel inside pytest reports (through execnet under xdist) and as JSON lines on disk,
so ``to_dict`` yields builtin types only and ``from_dict`` accepts exactly that.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any

import msgspec

from pytest_vlaeval.errors import EpisodeError
from pytest_vlaeval.strict_json import dumps, loads

SUCCESS = "success"
FAILURE = "failure"
ERROR = "error"


@dataclass(frozen=True)
class EpisodeRecord:
    task: str
    seed: int
    outcome: str
    success: bool | None
    episode_return: float | None
    length: int | None
    message: str
    wall_time: float
    worker: str
    time: str
    attempt: int = 1
    error_kind: str | None = None
    chunk_size: int | None = None
    model: dict[str, Any] | None = None
    render_backend: str | None = None
    env_built: bool | None = None
    """Whether this episode's env was built for it (not kept from the worker's previous episode)."""
    lockstep: int | None = None
    """The size of the block this episode ran in lockstep with (``--vla-lockstep``); None alone."""
    instruction: str | None = None
    """The instruction the policy got at the episode's start; None for an episode that did not end."""
    extras: dict[str, str | int | float | bool | None] | None = None
    """The benchmark adapter's own fields of the episode, as it gave them (``envs.adapter``:
    LIBERO's ``replayed_resets``, Push-T's ``max_reward``); None for an episode that did not end."""
    video: str | None = None
    detail: str | None = None
    """For errors raised by the policy or simulator: the original traceback."""

    @property
    def key(self) -> tuple[str, int]:
        return self.task, self.seed

    @cached_property
    def instant(self) -> datetime:
        """``time`` as an instant (``record_time``), parsed once: every record read is ordered by it."""
        return record_time(self.time)

    @property
    def completed(self) -> bool:
        """Completed episodes count toward success rates; errors never do."""
        return self.outcome != ERROR

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, values as they are (builtin types already): no deep copy, as it is
        made for every episode twice (the report and the log)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        """A record from its dict (a worker's report, a line of a log), its types checked: a log
        may come from elsewhere, and ``"success": "no"`` must not count as a success, nor an
        ``extras`` int of 400 digits crash every summary. Raises ``ValueError`` naming the field."""
        record = msgspec.convert(data, cls)
        if record.outcome not in (SUCCESS, FAILURE, ERROR):
            raise ValueError(f"outcome {record.outcome!r} is none of {SUCCESS}, {FAILURE}, {ERROR}")
        if record.completed and record.success is not (record.outcome == SUCCESS):
            raise ValueError(f"outcome {record.outcome!r} with success {record.success!r}")
        numbers = {"episode_return": record.episode_return, "wall_time": record.wall_time}
        numbers |= {f"extras[{key!r}]": value for key, value in (record.extras or {}).items()}
        for name, value in numbers.items():
            if problem := number_problem(value):
                raise ValueError(f"{name} {problem}")
        record.instant  # noqa: B018  (checks the time, and keeps it parsed)
        if not 1 <= record.attempt <= MAX_ATTEMPT:
            raise ValueError(f"attempt {record.attempt} is not from 1 to {MAX_ATTEMPT:,}")
        return record


_FIELD_NAMES = tuple(f.name for f in fields(EpisodeRecord))


def number_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a number of a record, or None. Summaries read every number as a
    float, so a float that is not finite and an int beyond the float range (``10**400``) are refused
    where they are made and wherever a record is read."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value}; expected a finite number"
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return f"is an int of about 10**{math.log10(abs(value)):.0f}; expected a number within the float range"
    return None


def parse_record(line: str | bytes) -> EpisodeRecord:
    """A log line as a record; ``ValueError`` (or ``TypeError``) saying why it is not one. Every
    reader of a log, and the writer of every line, ask this one function."""
    return EpisodeRecord.from_dict(loads(line))


def record_line(record: EpisodeRecord) -> str:
    """``record`` as a line of a log, newline included, or ``ValueError`` saying why it cannot be
    one: the line is checked by ``parse_record``, so none is kept that a later session or merge refuses."""
    line = dumps(record.to_dict())
    parse_record(line)
    return line + "\n"


MAX_ATTEMPT = 1_000_000
"""The highest attempt number a record may carry: no run reruns an episode this often, and one
past it is still a number every reader and writer of a log handles."""

MAX_LINE_BYTES = 256 * 2**20
"""The longest line of an episode log, in bytes. A record is a few KiB, and one with a policy's
huge exception at most ``DETAIL_LIMIT`` characters more (``error_record``). A longer line is damage,
refused without being read whole."""


def timestamp() -> str:
    """When a record was made (UTC, ISO 8601, by the clock of the host that ran the episode)."""
    return datetime.now(timezone.utc).isoformat()


def record_time(text: str) -> datetime:
    """A record's ``time`` as an instant; ``ValueError`` unless it is an ISO 8601 timestamp in UTC,
    as ``timestamp`` writes it (one without an offset is read as UTC)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    if moment.utcoffset() != timedelta(0):
        raise ValueError(f"time {text!r} is not in UTC")
    return moment


MESSAGE_LIMIT = 500
"""The longest error message a record carries, in characters."""

DETAIL_LIMIT = 16 * 2**20
"""The longest detail a record carries, in characters (a policy's exception of megabytes is kept
whole up to here; beyond, its start and end). Escaped as JSON, at most 12 bytes a character, it
stays below ``MAX_LINE_BYTES``, so no record is written that a reader refuses as damage."""


def error_record(
    task: str, seed: int, error: EpisodeError, *, worker: str, wall_time: float = 0.0, **extra: Any
) -> EpisodeRecord:
    """The record of an episode the harness could not evaluate; its message and kind come from
    the error, and the traceback of the error's cause (a policy's or simulator's own) is kept. The
    message is one line of at most ``MESSAGE_LIMIT`` characters (a policy's exception may hold
    megabytes, and the message is printed); a longer one is in ``detail``, which keeps the start and
    the end of at most ``DETAIL_LIMIT`` characters."""
    text = str(error)
    message = " ".join(text.split())
    detail = "".join(traceback.format_exception(error.__cause__)) if error.__cause__ else None
    if len(message) > MESSAGE_LIMIT:
        message = (
            f"{message[:MESSAGE_LIMIT]}... ({len(message) - MESSAGE_LIMIT:,} more characters in the record's detail)"
        )
        detail = f"{text}\n\n{detail or ''}".rstrip() + "\n"
    if detail is not None and len(detail) > DETAIL_LIMIT:
        half = DETAIL_LIMIT // 2
        detail = f"{detail[:half]}\n... ({len(detail) - 2 * half:,} characters left out) ...\n{detail[-half:]}"
    return EpisodeRecord(
        task=task,
        seed=seed,
        outcome=ERROR,
        success=None,
        episode_return=None,
        length=None,
        message=message,
        wall_time=wall_time,
        worker=worker,
        time=timestamp(),
        error_kind=error.kind,
        detail=detail,
        **extra,
    )


def outcome_message(success: bool, length: int, episode_return: float) -> str:
    verdict = "success" if success else "no success"
    where = "within" if success else "in"
    return f"{verdict} {where} {length} steps, return {episode_return:.3f}"
