"""The fixed gate: one paired comparison with the baseline once every episode has run.

Seeds are the unit (``stats``): on the seeds where every compared task has a completed episode
in both runs, the per-seed drop x_s = mean over tasks of (Y_base - Y_new) is independent across
seeds, and the split SR drop on those seeds is their mean. That paired drop both decides and is
reported. The test is one-sided, of "the drop is at most max drop": FAIL only when a one-sided
(1 - alpha) lower bound of the drop is above max drop, so a run whose true drop is max drop or
less FAILs with probability at most alpha. The bound comes from the method ``methods.drop_method``
picks when the session starts: the t test on the per-seed drops (variance floored) where that is
safe, else the betting confidence sequence, valid for any distribution. When even a drop of 1 on
every seed could not give FAIL with the seeds that can pair, the verdict is UNDECIDED (said at
session start), never PASS. Each task also gets its exact McNemar p-value, for the report.

pytest's own "N failed" is expected in any evaluation, so the verdict gets a line of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.methods import Method
from pytest_vlaeval.gate.plan import Design, Profile, baseline_profile, start_lines
from pytest_vlaeval.gate.protocol import JudgedAtTheEnd
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.gate.stats import Outcomes, group_sr, mcnemar_exact, paired_seed_sums, task_outcomes
from pytest_vlaeval.gate.verdict import FAIL, PASS, UNDECIDED, VERDICT_PREFIX


def drop_lower_bound(drops: Sequence[float], method: Method, alpha: float) -> float:
    """One-sided (1 - alpha) lower bound of the mean per-seed drop (values in [-1, 1]), one look."""
    lower, _ = method.bounds(np.asarray(drops, dtype=float), alpha, 1, (-1.0, 1.0))
    return float(lower[-1])


def paired_interval(drops: Sequence[float], method: Method, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) interval of the mean per-seed value (in [-1, 1]), one look: each side
    the method's one-sided bound at alpha / 2, so comparisons and the gate share one method."""
    lower, upper = method.bounds(np.asarray(drops, dtype=float), alpha / 2, 1, (-1.0, 1.0))
    return float(lower[-1]), float(upper[-1])


def can_fail(seeds: int, method: Method, alpha: float, max_drop: float) -> bool:
    """Whether ``seeds`` paired seeds could FAIL at all: a drop of 1 on every seed would."""
    return seeds > 0 and drop_lower_bound([1.0] * seeds, method, alpha) > max_drop


@dataclass(frozen=True)
class TaskComparison:
    env_id: str
    baseline_sr: float
    current_sr: float
    """Both on the paired seeds."""
    paired_seeds: int
    baseline_only: int
    current_only: int

    @property
    def drop(self) -> float:
        return self.baseline_sr - self.current_sr

    @property
    def p_value(self) -> float | None:
        return mcnemar_exact(self.baseline_only, self.current_only) if self.paired_seeds else None


@dataclass(frozen=True)
class FixedGate(JudgedAtTheEnd):
    """The fixed gate as settled when the session starts: baseline, threshold, level and method
    (a ``protocol.Gate``)."""

    baseline: Baseline
    settings: GateSettings
    method: Method
    seeds: int
    """Seeds this run can pair with the baseline on every compared task, if none errors."""
    episodes: int
    """The run's seeds per task."""

    @classmethod
    def create(cls, baseline: Baseline, seeds: Sequence[int], settings: GateSettings) -> FixedGate:
        pairable = len(baseline.paired_seeds(seeds))
        method = baseline.method(pairable, settings.max_drop, settings.assume)
        return cls(baseline, settings, method, pairable, len(seeds))

    @property
    def max_drop(self) -> float:
        return self.settings.max_drop

    @property
    def alpha(self) -> float:
        return self.settings.alpha

    @property
    def tasks(self) -> int:
        return len(self.baseline.outcomes)

    def design(self, seeds: int) -> Design:
        """This gate at a budget of ``seeds`` paired seeds, for the plan."""
        method = self.baseline.method(seeds, self.max_drop, self.settings.assume)
        return Design(method, self.alpha, seeds, self.max_drop, sequential=False)

    def profile(self) -> Profile:
        """What the plan simulates: the baseline's SRs and seed correlation."""
        return baseline_profile(self.baseline)

    def start_lines(self) -> list[str]:
        """What to say before any episode runs: the plan, and that the gate cannot FAIL, when it cannot."""
        lines = start_lines(self.design(self.seeds), self.profile(), self.seeds)
        if self.seeds < self.episodes:
            lines.append(
                f"{VERDICT_PREFIX}: the baseline pairs {self.seeds} of this run's {self.episodes} seeds: the gate "
                f"judges those (a baseline run with --episodes={self.episodes} lets it judge them all)"
            )
        if not can_fail(self.seeds, self.method, self.alpha, self.max_drop):
            lines.append(
                f"{VERDICT_PREFIX}: this run pairs {self.seeds} seeds with the baseline: too few to show a drop above "
                f"{self.max_drop:g} at alpha {self.alpha:g} ({self._method_note}); run more episodes (--episodes). "
                f"The verdict will be {UNDECIDED}"
            )
        return lines

    @property
    def _method_note(self) -> str:
        return f"{self.method.name}: {self.method.reason}"

    def judge(
        self, per_task: Sequence[Mapping[str, Any]], unreported: int = 0, resume_command: str | None = None
    ) -> GateResult:
        """The verdict on this run's per-task results (canonical ``TaskResult`` records); a fixed
        gate never stops a session early, so the rest of ``Gate.judge``'s arguments say nothing to it."""
        current = {r["env_id"]: task_outcomes(r) for r in per_task}
        current = {t: o for t, o in current.items() if o}
        compared = [t for t in self.baseline.outcomes if t in current]
        not_run = [t for t in self.baseline.outcomes if t not in current]
        sums = paired_seed_sums({t: current[t] for t in compared}, {t: self.baseline.outcomes[t] for t in compared})
        tasks = [_task(t, current[t], self.baseline.outcomes[t], list(sums)) for t in compared]
        return GateResult(self, tasks, {s: -k / len(compared) for s, k in sums.items()}, tuple(not_run))


def _task(env_id: str, current: Outcomes, baseline: Outcomes, seeds: list[int]) -> TaskComparison:
    return TaskComparison(
        env_id=env_id,
        baseline_sr=sum(baseline[s] for s in seeds) / len(seeds) if seeds else 0.0,
        current_sr=sum(current[s] for s in seeds) / len(seeds) if seeds else 0.0,
        paired_seeds=len(seeds),
        baseline_only=sum(baseline[s] and not current[s] for s in seeds),
        current_only=sum(current[s] and not baseline[s] for s in seeds),
    )


@dataclass(frozen=True)
class GateResult:
    gate: FixedGate
    tasks: list[TaskComparison] = field(default_factory=list)
    drops: dict[int, float] = field(default_factory=dict)
    """Per paired seed, the mean over compared tasks of Y_base - Y_new."""
    not_run: tuple[str, ...] = ()
    """Tasks of the baseline with no completed episode in this run."""
    made_with_note: str | None = None
    """What the baseline was made with, where another stack than this run's (``Verdict.made_with``)."""

    @property
    def drop(self) -> float | None:
        return sum(self.drops.values()) / len(self.drops) if self.drops else None

    @property
    def lower_bound(self) -> float | None:
        return drop_lower_bound(list(self.drops.values()), self.gate.method, self.gate.alpha) if self.drops else None

    @property
    def decidable(self) -> bool:
        return can_fail(len(self.drops), self.gate.method, self.gate.alpha, self.gate.max_drop)

    @property
    def outcome(self) -> str:
        if not self.decidable:
            return UNDECIDED
        assert self.lower_bound is not None
        return FAIL if self.lower_bound > self.gate.max_drop else PASS

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    @property
    def not_compared(self) -> str:
        parts = [self.gate.baseline.not_compared]
        if self.not_run:
            parts.append(f"no completed episode in this run: {', '.join(self.not_run)}")
        return "; ".join(p for p in parts if p)

    def verdict(self) -> str:
        gate = self.gate
        level = f"one-sided {1 - gate.alpha:.0%} lower bound"
        if self.drop is None:
            what = "no seed has a completed episode of every compared task in both runs"
        else:
            assert self.lower_bound is not None
            relation = ">" if self.lower_bound > gate.max_drop else "<="
            base = group_sr(t.baseline_sr for t in self.tasks)
            what = (
                f"split SR drop {self.drop:+.3f} paired on {len(self.drops)} seeds x {len(self.tasks)} tasks "
                f"({level} {self.lower_bound:+.3f} {relation} max drop {gate.max_drop:.3f}; "
                f"split SR {base - self.drop:.3f} vs baseline {base:.3f} on those seeds)"
            )
            if not self.decidable:
                what += f"; {len(self.drops)} paired seeds cannot show a drop above max drop at this alpha"
        missing = f"; not compared: {self.not_compared}" if self.not_compared else ""
        made_with = f"; {self.made_with_note}" if self.made_with_note else ""
        return (
            f"{VERDICT_PREFIX}: {self.outcome}: {what}{missing}; method: {self._method}, alpha {gate.alpha:g}"
            f"{made_with}"
        )

    def made_with(self, note: str) -> GateResult:
        return replace(self, made_with_note=note)

    @property
    def _method(self) -> str:
        return f"fixed {self.gate.method.name}, seeds as the unit ({self.gate.method.reason})"

    def as_dict(self) -> dict[str, Any]:
        """The gate's fields in ``summary.json``."""
        return {
            "method": self._method,
            "verdict": self.outcome,
            "verdict_line": self.verdict(),
            "baseline": str(self.gate.baseline.directory),
            "max_drop": self.gate.max_drop,
            "alpha": self.gate.alpha,
            "paired_seeds": len(self.drops),
            "paired_drop": self.drop,
            "paired_drop_lower_bound": self.lower_bound,
            "not_compared": self.not_compared or None,
            "made_with": self.made_with_note,
        }
