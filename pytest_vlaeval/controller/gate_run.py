"""The gate over one session: the fixed or the sequential gate as configured, the verdict once
the session ends, and after an early stop the command that completes the run. The controller
asks it; nothing outside sets the gate's fields."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.fixed import FixedGate
from pytest_vlaeval.gate.sequential_gate import SequentialGate
from pytest_vlaeval.gate.stats import Outcomes
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED, FAIL, UNDECIDED, Verdict
from pytest_vlaeval.schema import TaskResult

JUDGED_BY_THE_GATE = (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
"""Exit statuses a passing gate turns into 0: failed episodes are the measurement, and a session
that selected nothing (``--vla-rerun=errors`` on a complete run) just re-judges the run."""


class GateRun:
    def __init__(self, configured: FixedGate | SequentialGate | None) -> None:
        self.fixed = configured if isinstance(configured, FixedGate) else None
        self.sequential = configured if isinstance(configured, SequentialGate) else None
        self.verdict: Verdict | None = None
        """The verdict, once the session ends."""
        self.resume_command: str | None = None
        """The command that completes the run, once the sequential gate stopped the session early."""

    @property
    def baseline(self) -> Baseline | None:
        return self.fixed.baseline if self.fixed else self.sequential.baseline if self.sequential else None

    @property
    def stopped_early(self) -> bool:
        return self.resume_command is not None

    def start_lines(self) -> list[str]:
        gate = self.fixed or self.sequential
        return gate.start_lines() if gate is not None else []

    def schedule(self, seed: int) -> None:
        if self.sequential:
            self.sequential.schedule(seed)

    def settle(self, seed: int, outcomes: Callable[[], Mapping[str, Outcomes]]) -> tuple[list[str], bool]:
        """An episode settled: the lines of the looks it completed (with their chance of
        deciding), and whether the session should stop: no episode can change the sequential
        verdict, and episodes are still to run."""
        if not self.sequential:
            return [], False
        looked = len(self.sequential.looks)
        settled = self.sequential.settle(seed, outcomes)
        new = self.sequential.looks[looked:]
        gate = self.sequential
        return [gate.look_line(look) for look in new if gate.open_with_budget(look)], settled

    def stop(self, resume_command: str) -> str:
        """Stop early; the reason pytest is given."""
        assert self.sequential is not None
        self.resume_command = resume_command
        gate = self.sequential
        if gate.outcome == UNDECIDED:
            return f"{UNDECIDED}: {gate.short_baseline}"
        return f"{gate.outcome}: the sequential gate's verdict is settled"

    def judge(self, unreported: int, per_task: list[TaskResult]) -> Verdict | None:
        """The verdict as the session ends; after an early stop, the ``unreported`` episodes were
        not needed (neither errors nor lost)."""
        if self.sequential is not None:
            saved = unreported if self.stopped_early else None
            self.verdict = self.sequential.result(saved, self.resume_command)
        elif self.fixed is not None:
            self.verdict = self.fixed.judge(per_task)
        return self.verdict

    def exit_status(self, status: int, errored: bool, undecided_exit: int) -> int:
        """6 on FAIL, ``--vla-undecided-exit`` on UNDECIDED; on PASS, 1 if an episode of this
        session errored (an incomplete run never passes), else 0 where the gate judges the run."""
        assert self.verdict is not None
        if self.verdict.outcome == FAIL:
            return EXIT_GATE_FAILED
        if self.verdict.outcome == UNDECIDED:
            return undecided_exit
        if status not in JUDGED_BY_THE_GATE and not self.stopped_early:
            return status
        if errored:
            return pytest.ExitCode.TESTS_FAILED
        return pytest.ExitCode.OK  # failed episodes are the measurement; the gate judged it
