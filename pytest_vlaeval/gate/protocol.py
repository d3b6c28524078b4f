"""The one type a gate is held by: the session, the scheduler, the plan and ``vlaeval merge``
call a ``Gate``'s methods and never ask which gate it is (``fixed.FixedGate``,
``sequential_gate.SequentialGate`` or ``NoGate``, chosen once when the session starts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from pytest_vlaeval.errors import SpecError

if TYPE_CHECKING:
    from pytest_vlaeval.gate.baseline import Baseline
    from pytest_vlaeval.gate.plan import Design, Profile
    from pytest_vlaeval.gate.stats import Outcomes
    from pytest_vlaeval.gate.verdict import Verdict
    from pytest_vlaeval.schema import TaskResult

NOTHING_TO_PLAN = "--vla-gate-plan plans a gate: add --vla-baseline=DIR or --vla-sequential --vla-min-sr=X"
"""What ``--vla-gate-plan`` says without a gate: the options that give one."""


class SeedBlocks(Protocol):
    """What the scheduler needs of a gate that looks after every block of seeds: an episode's
    block, and whether any episode can still change the verdict."""

    def block_of_seed(self, seed: int) -> int: ...

    @property
    def done(self) -> bool: ...


class Gate(Protocol):
    """A gate over one session, from before its first episode to its verdict."""

    @property
    def baseline(self) -> Baseline | None:
        """The run it compares with, for the report's flipped episodes (None: no baseline)."""

    def start_lines(self) -> list[str]:
        """What to say before any episode runs."""

    def schedule(self, seed: int) -> None:
        """An episode of ``seed`` is scheduled in this session."""

    def settle(self, seed: int, outcomes: Callable[[], Mapping[str, Outcomes]]) -> tuple[list[str], str | None]:
        """An episode of ``seed`` settled (``outcomes``: the run's task -> seed -> success, asked
        for only when the gate looks): the lines of the looks it completed, and the reason to
        stop the session when no episode can change the verdict (None: go on)."""

    def judge(
        self, per_task: Sequence[TaskResult], unreported: int = 0, resume_command: str | None = None
    ) -> Verdict | None:
        """The verdict as the session ends (None: no gate); after an early stop (``resume_command``
        completes the run) the ``unreported`` episodes were not needed."""

    def seed_blocks(self) -> SeedBlocks | None:
        """The blocks the scheduler hands out in order (None: any order)."""

    def design(self, seeds: int) -> Design:
        """This gate at a budget of ``seeds``, for the plan."""

    def profile(self) -> Profile:
        """The benchmark the plan simulates."""


class JudgedAtTheEnd:
    """A gate that judges once, as the session ends: nothing to count as episodes are
    scheduled and settle, and no order of seeds."""

    def schedule(self, seed: int) -> None:
        pass

    def settle(self, seed: int, outcomes: Callable[[], Mapping[str, Outcomes]]) -> tuple[list[str], str | None]:
        return [], None

    def seed_blocks(self) -> SeedBlocks | None:
        return None


class NoGate(JudgedAtTheEnd):
    """No baseline and no min SR: the session says nothing of a gate and has no verdict."""

    @property
    def baseline(self) -> Baseline | None:
        return None

    def start_lines(self) -> list[str]:
        return []

    def judge(
        self, per_task: Sequence[TaskResult], unreported: int = 0, resume_command: str | None = None
    ) -> Verdict | None:
        return None

    def design(self, seeds: int) -> Design:
        raise SpecError(NOTHING_TO_PLAN)

    def profile(self) -> Profile:
        raise SpecError(NOTHING_TO_PLAN)
