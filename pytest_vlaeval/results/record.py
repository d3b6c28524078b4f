"""The per-episode record: what a worker sends to the controller and what the store keeps.

Records travel inside pytest reports (through execnet under xdist) and as JSON lines on disk,
so ``to_dict`` yields builtin types only and ``from_dict`` accepts exactly that.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

import msgspec

from pytest_vlaeval.errors import EpisodeError

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
        may come from elsewhere, and ``"success": "no"`` must not count as a success. Raises
        ``ValueError`` naming the field."""
        record = msgspec.convert(data, cls)
        if record.outcome not in (SUCCESS, FAILURE, ERROR):
            raise ValueError(f"outcome {record.outcome!r} is none of {SUCCESS}, {FAILURE}, {ERROR}")
        if record.completed and record.success is not (record.outcome == SUCCESS):
            raise ValueError(f"outcome {record.outcome!r} with success {record.success!r}")
        return record


_FIELD_NAMES = tuple(f.name for f in fields(EpisodeRecord))


def timestamp() -> str:
    """When a record was made (UTC, ISO 8601): the store's order of attempts."""
    return datetime.now(timezone.utc).isoformat()


MESSAGE_LIMIT = 500
"""The longest error message a record carries, in characters."""


def error_record(
    task: str, seed: int, error: EpisodeError, *, worker: str, wall_time: float = 0.0, **extra: Any
) -> EpisodeRecord:
    """The record of an episode the harness could not evaluate; its message and kind come from
    the error, and the traceback of the error's cause (a policy's or simulator's own) is kept. The
    message is one line of at most ``MESSAGE_LIMIT`` characters (a policy's exception may hold
    megabytes, and the message is printed); a longer one is whole in ``detail``."""
    text = str(error)
    message = " ".join(text.split())
    detail = "".join(traceback.format_exception(error.__cause__)) if error.__cause__ else None
    if len(message) > MESSAGE_LIMIT:
        message = (
            f"{message[:MESSAGE_LIMIT]}... ({len(message) - MESSAGE_LIMIT:,} more characters in the record's detail)"
        )
        detail = f"{text}\n\n{detail or ''}".rstrip() + "\n"
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
