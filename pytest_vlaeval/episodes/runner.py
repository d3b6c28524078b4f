"""Worker side: how a session's episodes become records, one strategy per execution mode.

The mode is chosen once, where the session is configured: each episode alone (``LoneEpisodes``),
a task's seeds in one sequence as the reference runner runs them (``ReferenceOrder``,
``--vla-reference-order``), or K episodes stepped together with one batched policy call per step
(``LockstepGroups``, ``--vla-lockstep=K``). Every mode runs on a ``Worker`` (the policy and env
it keeps between episodes) and builds its records with ``episode_record``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from pytest_vlaeval.benchmark.model import Task
from pytest_vlaeval.episodes.loop import EpisodeResult
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.errors import EpisodeError
from pytest_vlaeval.results.record import FAILURE, SUCCESS, EpisodeRecord, error_record, outcome_message, timestamp

Group = Sequence[tuple[int, int]]
"""``(seed, index)`` of the episodes run together with one (itself included; itself alone but
under ``--vla-lockstep``)."""


class EpisodeRunner(ABC):
    """One execution mode: turns a worker's episodes into records. Every harness-side problem
    becomes an error record, never a failure."""

    group_size: int = 1
    """Episodes run together (``--vla-lockstep``); the scheduler sends and the items ask in whole groups."""

    def __init__(self, worker: Worker, timeout: float | None = None) -> None:
        self.worker = worker
        self.timeout = timeout

    @abstractmethod
    def record(self, task: Task, seed: int, group: Group) -> EpisodeRecord:
        """The episode's record, run now with its group (or taken from a group-mate's run)."""

    @abstractmethod
    def retry(self, task: Task, seed: int, index: int) -> EpisodeRecord:
        """Run the episode again, alone, after an error (the env kept was closed)."""

    def check_order(self, episodes: Sequence[tuple[str, int]]) -> None:
        """Refuse (``SpecError``) a selection of ``(task, index)`` this mode cannot run; any by default."""
        return None  # every selection runs

    def close(self) -> None:
        self.worker.close_env()


def episode_record(task: Task, seed: int, outcome: EpisodeResult | EpisodeError, **fields: Any) -> EpisodeRecord:
    """The record of an episode that finished (success or failure) or could not (an error)."""
    if isinstance(outcome, EpisodeError):
        return error_record(task.env_id, seed, outcome, **fields)
    return EpisodeRecord(
        task=task.env_id,
        seed=seed,
        outcome=SUCCESS if outcome.success else FAILURE,
        success=outcome.success,
        episode_return=outcome.episode_return,
        length=outcome.length,
        message=outcome_message(outcome.success, outcome.length, outcome.episode_return),
        time=timestamp(),
        instruction=outcome.instruction,
        extras=outcome.extras,
        **fields,
    )


def since(started: float) -> float:
    """Seconds since ``started`` (``time.perf_counter``), as records keep them."""
    return round(time.perf_counter() - started, 3)
