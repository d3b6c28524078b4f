"""What a session adds to its gate (``gate.protocol.Gate``): after an early stop the command
that completes the run, the verdict once the session ends, with what the baseline was made with
where that is another stack than this run's (``results.made_with``), and the exit status it gives.
The controller asks it; nothing outside sets its fields."""

from __future__ import annotations

import pytest

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.protocol import Gate
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED, FAIL, UNDECIDED, Verdict
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.results.made_with import MadeWith, baseline_made_with, gate_note, made_with
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.schema import TaskResult

JUDGED_BY_THE_GATE = (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
"""Exit statuses a passing gate turns into 0: failed episodes are the measurement, and a session
that selected nothing (``--vla-rerun=errors`` on a complete run) just re-judges the run."""


class GateRun:
    def __init__(self, gate: Gate, run: RunDir) -> None:
        """``run``: this session's run, whose record the baseline's is held against. A baseline's
        fingerprint this package did not write stops the session now, in one line."""
        self.gate = gate
        self.run = run
        try:
            self._baseline_made_with = baseline_made_with(gate.baseline.directory) if gate.baseline else None
        except SpecError as exc:
            raise pytest.UsageError(terminal_safe(f"--vla-baseline: {exc}")) from None
        self.verdict: Verdict | None = None
        """The verdict, once the session ends."""
        self.resume_command: str | None = None
        """The command that completes the run, once the gate stopped the session early."""

    @property
    def stopped_early(self) -> bool:
        return self.resume_command is not None

    def stop(self, resume_command: str) -> None:
        """The gate stopped the session early; ``resume_command`` completes the run."""
        self.resume_command = resume_command

    def judge(self, unreported: int, per_task: list[TaskResult]) -> Verdict | None:
        """The verdict as the session ends; after an early stop, the ``unreported`` episodes were
        not needed (neither errors nor lost)."""
        verdict = self.gate.judge(per_task, unreported, self.resume_command)
        note = self.made_with_note()
        self.verdict = verdict.made_with(note) if verdict is not None and note else verdict
        return self.verdict

    def made_with_note(self, run: MadeWith | None = None) -> str | None:
        """What the baseline was made with where that is another stack than this run's (``run``:
        as the run's files say now, by default), or unknown; None without a baseline."""
        if self.gate.baseline is None:
            return None
        return gate_note(run or made_with(self.run.path), self._baseline_made_with)

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
