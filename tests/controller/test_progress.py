"""The live ETA: priced from what is left at the rate of the steps actually run, a range early; and
the live panel, shown only when asked or on a terminal, beside the plain per-task lines."""

from __future__ import annotations

import re

import pytest

from pytest_vlaeval.controller.progress import BUILD_STEPS, RESET_STEPS, Progress
from pytest_vlaeval.errors import EnvError
from pytest_vlaeval.results.record import FAILURE, EpisodeRecord, error_record, timestamp

SHORT = ["--benchmark=fake.yaml:short"]
STEPS = 100
SECONDS_PER_STEP = 0.1
EPISODE_SECONDS = (STEPS + RESET_STEPS + BUILD_STEPS) * SECONDS_PER_STEP
"""A task's only episode: an env build, a reset and every step (the random policy fails)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _failure(task: str) -> EpisodeRecord:
    return EpisodeRecord(task, 0, FAILURE, False, 0.0, STEPS, "", EPISODE_SECONDS, "gw0", timestamp())


def _short_split(clock: Clock, tasks: int) -> Progress:
    progress = Progress(None, {f"T{i}": STEPS for i in range(tasks)}, live=False, clock=clock)
    for i in range(tasks):
        progress.schedule(f"T{i}")
    return progress


def test_episodes_that_errored_at_once_do_not_make_the_eta_optimistic() -> None:
    """Tasks whose env cannot be built settle first and fast (the short split's 9 tasks without
    a completed episode): they ran no steps, so they must not count as work done."""
    clock = Clock()
    progress = _short_split(clock, tasks=10)
    for i in range(3):
        progress.settled(error_record(f"T{i}", 0, EnvError("cannot build"), worker="gw0"))
    for i in range(3, 6):
        clock.now += EPISODE_SECONDS
        progress.settled(_failure(f"T{i}"))
    left = 4 * EPISODE_SECONDS
    eta = progress.eta()
    assert eta is not None
    estimate, low, high = eta
    assert estimate == pytest.approx(left, rel=0.05) and low < left < high  # the old rate said half of it


def test_the_eta_is_a_range_until_enough_episodes_completed_and_unknown_before_any() -> None:
    clock = Clock()
    assert Progress(None, {}, live=False, clock=clock)._overall() == "0/0 episodes, 0m00s, starting"
    progress = _short_split(clock, tasks=200)
    assert progress.eta() is None and "ETA after the first completed episode" in progress._overall()
    for i in range(150):
        clock.now += EPISODE_SECONDS
        progress.settled(_failure(f"T{i}"))
        eta = progress.eta()
        assert eta is not None
        assert (eta[1] < eta[0] < eta[2]) == (i + 1 < 100), i
    assert progress.eta() == pytest.approx((50 * EPISODE_SECONDS,) * 3)


def test_bringing_up_the_workers_is_not_priced_as_episode_work() -> None:
    clock = Clock()
    progress = Progress(None, {"T0": STEPS, "T1": STEPS}, live=False, clock=clock)
    clock.now = 600.0  # xdist workers importing the simulator on a loaded machine
    progress.schedule("T0")
    progress.schedule("T1")
    clock.now += EPISODE_SECONDS
    progress.settled(_failure("T0"))
    eta = progress.eta()
    assert eta is not None and eta[0] == pytest.approx(EPISODE_SECONDS)


def test_live_panel_when_asked_and_plain_lines_otherwise(fake: pytest.Pytester) -> None:
    plain = fake.runpytest_subprocess(*SHORT, "-q", "--vla-results=plain")
    assert "╭" not in plain.stdout.str(), "no live panel when stdout is not a terminal"
    plain.stdout.fnmatch_lines(["vlaeval: Alpha-v0 SR *", "vlaeval: Beta-v0 SR * | 6/6 episodes, *, done"])
    live = fake.runpytest_subprocess(*SHORT, "-q", "--vla-live=on", "--vla-results=live")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", live.stdout.str())  # drop colours and cursor moves
    assert "─ vlaeval ─" in text and "SR so far" in text
    live.stdout.fnmatch_lines(["*vlaeval: Beta-v0 SR * | 6/6 episodes, *, done", "*2 failed, 4 passed*"])
    assert live.parseoutcomes() == plain.parseoutcomes()
