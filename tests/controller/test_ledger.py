"""The controller's bookkeeping on its own, without a pytest session."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_vlaeval.controller.ledger import Ledger
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import ERROR, MAX_ATTEMPT, SUCCESS, EpisodeRecord, record_line
from pytest_vlaeval.results.rundir import RunDir


def record(task: str, seed: int, outcome: str = SUCCESS) -> EpisodeRecord:
    return EpisodeRecord(
        task=task,
        seed=seed,
        outcome=outcome,
        success=outcome == SUCCESS or None,
        episode_return=None,
        length=None,
        message="",
        wall_time=0.0,
        worker="main",
        time="2026-01-01T00:00:00+00:00",
    )


def test_a_task_is_done_when_its_last_scheduled_episode_settles(tmp_path: Path) -> None:
    ledger = Ledger(LatestRecords(RunDir(tmp_path)), retries=0)
    assert ledger.schedule([("s::A::1", ("A", 1)), ("s::A::2", ("A", 2)), ("s::B::1", ("B", 1))]) == [
        ("A", 1),
        ("A", 2),
        ("B", 1),
    ]
    assert ledger.schedule([("s::A::1", ("A", 1))]) == []  # each worker reports the same collection
    assert ledger.expects("s::A::1") and not ledger.expects("s::C::1")
    assert ledger.unsettled() == 3
    assert not ledger.settle("s::A::1")
    assert not ledger.expects("s::A::1")
    assert ledger.unsettled() == 2 == len(ledger.unreported())
    assert ledger.settle("s::A::2")
    assert ledger.unreported() == ["s::B::1"]


def test_attempts_are_numbered_across_sessions_and_errors_are_this_sessions(tmp_path: Path) -> None:
    earlier = LatestRecords(RunDir(tmp_path))
    earlier.add(EpisodeRecord.from_dict({**record("A", 1, ERROR).to_dict(), "attempt": 2}))
    ledger = Ledger(earlier, retries=1)
    ledger.schedule([("s::A::1", ("A", 1)), ("s::A::2", ("A", 2))])
    assert not ledger.errored()  # the earlier session's error is not this session's
    assert ledger.number(record("A", 1, ERROR)).attempt == 3
    assert ledger.number(record("A", 2)).attempt == 1
    ledger.settle("s::A::2")
    assert not ledger.errored()
    ledger.settle("s::A::1")
    assert ledger.errored()


def test_a_crash_is_retried_as_often_as_asked(tmp_path: Path) -> None:
    ledger = Ledger(LatestRecords(RunDir(tmp_path)), retries=2)
    ledger.schedule([("s::A::1", ("A", 1))])
    assert [ledger.retry_crash("s::A::1") for _ in range(3)] == [True, True, False]


def test_an_episode_at_the_last_attempt_number_keeps_it_and_the_next_record_is_still_stored(tmp_path: Path) -> None:
    """A received log may hold an attempt numbered ``MAX_ATTEMPT``: one past it no log would take."""
    latest = LatestRecords(RunDir(tmp_path))
    latest.add(dataclasses.replace(record("A", 1, ERROR), attempt=MAX_ATTEMPT))
    numbered = Ledger(latest, retries=0).number(dataclasses.replace(record("A", 1), time="2026-01-02T00:00:00+00:00"))
    assert numbered.attempt == MAX_ATTEMPT and latest[("A", 1)] is numbered
    record_line(numbered)  # the store's check: no ValueError
