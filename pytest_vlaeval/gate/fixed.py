"""The regression gate: compare this run with a baseline and decide pass or fail.

A baseline is a directory of per-task JSON files in the canonical schema: one of our run
directories, or the benchmark's reference runner's output. Split SRs are compared over the
tasks both runs have (means of per-task SRs, like with like). Where both runs evaluated the
same seeds, the comparison is paired with the seed as the unit (``stats``): the split SR
difference on those seeds with its interval, and an exact sign-flip p-value that stays valid
when tasks sharing a seed are correlated. Each task also gets its exact McNemar p-value.

The session fails with ``EXIT_GATE_FAILED`` when the split SR dropped by more than
``max_drop`` (and, when ``alpha`` is set, the drop is significant at that level). pytest's own
"N failed" is expected in any evaluation, so the verdict gets a line of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vlaeval.gate.sequential import drop_bounds
from pytest_vlaeval.gate.stats import Outcomes, group_sr, mcnemar_exact, paired_seed_sums, sign_flip_exact
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED, FAIL, PASS, UNDECIDED, VERDICT_PREFIX
from pytest_vlaeval.results.schema import ReferenceTaskResult, TaskResult

__all__ = ["EXIT_GATE_FAILED", "FAIL", "PASS", "UNDECIDED", "VERDICT_PREFIX", "GateResult", "compare"]


@dataclass(frozen=True)
class TaskComparison:
    env_id: str
    baseline_sr: float
    current_sr: float
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
class GateResult:
    baseline: str
    max_drop: float
    alpha: float | None
    tasks: list[TaskComparison] = field(default_factory=list)
    seed_sums: dict[int, int] = field(default_factory=dict)
    """Per paired seed, the sum over tasks of Y_new - Y_base (``stats.paired_seed_sums``)."""
    problem: str | None = None

    @property
    def baseline_sr(self) -> float:
        return group_sr(t.baseline_sr for t in self.tasks)

    @property
    def current_sr(self) -> float:
        return group_sr(t.current_sr for t in self.tasks)

    @property
    def drop(self) -> float:
        return self.baseline_sr - self.current_sr

    @property
    def paired_drop(self) -> tuple[float, tuple[float, float]] | None:
        """The split SR drop on the paired seeds, with its 95% interval (seeds as the unit; the
        sequential gate's confidence sequence at its last point, valid at any number of seeds)."""
        if not self.seed_sums:
            return None
        estimate, lower, upper = drop_bounds([k / len(self.tasks) for k in self.seed_sums.values()], 0.05)
        return float(estimate[-1]), (float(lower[-1]), float(upper[-1]))

    @property
    def p_value(self) -> float | None:
        return sign_flip_exact(list(self.seed_sums.values())) if self.seed_sums else None

    @property
    def outcome(self) -> str:
        if self.problem:
            return FAIL
        if self.drop <= self.max_drop:
            return PASS
        significant = self.alpha is None or (self.p_value is not None and self.p_value < self.alpha)
        return FAIL if significant else PASS

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def verdict(self) -> str:
        if self.problem:
            return f"{VERDICT_PREFIX}: {FAIL}: {self.problem}"
        relation = "<=" if self.drop <= self.max_drop else ">"
        line = (
            f"{VERDICT_PREFIX}: {self.outcome}: split SR {self.current_sr:.3f} vs baseline {self.baseline_sr:.3f} over "
            f"{len(self.tasks)} tasks (drop {self.drop:+.3f} {relation} {self.max_drop:.3f})"
        )
        paired = self.paired_drop
        if paired is not None:
            drop, (low, high) = paired
            line += (
                f"; paired on {len(self.seed_sums)} seeds: drop {drop:+.3f} [95% CI {low:+.3f}, {high:+.3f}], "
                f"seed-level sign-flip exact p={self.p_value:.4g}"
            )
            if self.alpha is not None:
                line += f", alpha {self.alpha:g}"
        return line

    def as_dict(self) -> dict[str, Any]:
        """The gate's fields in ``summary.json``."""
        paired = self.paired_drop
        return {
            "method": "fixed: seed-level paired comparison, exact sign-flip test",
            "verdict": self.outcome,
            "verdict_line": self.verdict(),
            "baseline": self.baseline,
            "max_drop": self.max_drop,
            "alpha": self.alpha,
            "drop": self.drop if self.tasks else None,
            "paired_seeds": len(self.seed_sums),
            "paired_drop": paired[0] if paired else None,
            "paired_drop_ci95": list(paired[1]) if paired else None,
            "p_value": self.p_value,
        }


def load_baseline(path: Path) -> dict[str, ReferenceTaskResult]:
    """Per-task results (env_id -> JSON) from a directory of canonical per-task files."""
    if not path.is_dir():
        raise FileNotFoundError(f"--vla-baseline {path}: not a directory")
    found = {}
    for file in sorted(path.glob("*.json")):
        data = json.loads(file.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "env_id" in data and "successes" in data:
            found[data["env_id"]] = data
    return found


def task_outcomes(result: Mapping[str, Any]) -> dict[int, bool]:
    """seed -> success of one per-task JSON (none when it lists no ``episode_seeds``)."""
    return {int(s): bool(y) for s, y in zip(result.get("episode_seeds", []), result["successes"], strict=False)}


def outcomes_by_task(results: Iterable[Mapping[str, Any]]) -> dict[str, Outcomes]:
    return {r["env_id"]: task_outcomes(r) for r in results if r["successes"]}


def compare(per_task: list[TaskResult], baseline_dir: Path, max_drop: float, alpha: float | None) -> GateResult:
    try:
        baseline = load_baseline(baseline_dir)
    except (OSError, ValueError) as exc:
        return GateResult(str(baseline_dir), max_drop, alpha, problem=f"cannot read the baseline: {exc}")
    tasks = []
    for current in per_task:
        base = baseline.get(current["env_id"])
        if base is None or not base["successes"]:
            continue
        mine, theirs = task_outcomes(current), task_outcomes(base)
        paired = sorted(set(mine) & set(theirs))
        tasks.append(
            TaskComparison(
                env_id=current["env_id"],
                baseline_sr=float(base["sr"]),
                current_sr=float(current["sr"]),
                paired_seeds=len(paired),
                baseline_only=sum(theirs[s] and not mine[s] for s in paired),
                current_only=sum(mine[s] and not theirs[s] for s in paired),
            )
        )
    if not tasks:
        return GateResult(
            str(baseline_dir),
            max_drop,
            alpha,
            problem=f"no task of this run has results in the baseline {baseline_dir}",
        )
    compared = {t.env_id for t in tasks}
    sums = paired_seed_sums(
        {k: v for k, v in outcomes_by_task(per_task).items() if k in compared},
        {k: v for k, v in outcomes_by_task(baseline.values()).items() if k in compared},
    )
    return GateResult(str(baseline_dir), max_drop, alpha, tasks, sums)
