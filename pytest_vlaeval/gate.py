"""The regression gate: compare this run with a baseline and decide pass or fail.

A baseline is a directory of per-task JSON files in the canonical schema: one of our run
directories, or the benchmark's reference runner's output. Split SRs are compared over the
tasks both runs have (means of per-task SRs, like with like). Where both runs evaluated the
same seeds, an exact paired McNemar test on the discordant seeds gives a p-value.

The session fails with ``EXIT_GATE_FAILED`` when the split SR dropped by more than
``max_drop`` (and, when ``alpha`` is set, the drop is significant at that level). pytest's own
"N failed" is expected in any evaluation, so the verdict gets a line of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vlaeval.stats import mcnemar_exact

EXIT_GATE_FAILED = 6
"""Exit status of a session whose success rate regressed past the gate (pytest uses 0-5)."""


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
    problem: str | None = None

    @property
    def baseline_sr(self) -> float:
        return sum(t.baseline_sr for t in self.tasks) / len(self.tasks)

    @property
    def current_sr(self) -> float:
        return sum(t.current_sr for t in self.tasks) / len(self.tasks)

    @property
    def drop(self) -> float:
        return self.baseline_sr - self.current_sr

    @property
    def discordant(self) -> tuple[int, int]:
        return sum(t.baseline_only for t in self.tasks), sum(t.current_only for t in self.tasks)

    @property
    def p_value(self) -> float | None:
        if not any(t.paired_seeds for t in self.tasks):
            return None
        return mcnemar_exact(*self.discordant)

    @property
    def passed(self) -> bool:
        if self.problem:
            return False
        if self.drop <= self.max_drop:
            return True
        return self.alpha is not None and (self.p_value is None or self.p_value >= self.alpha)

    def verdict(self) -> str:
        if self.problem:
            return f"vlaeval gate: FAIL: {self.problem}"
        word = "PASS" if self.passed else "FAIL"
        relation = "<=" if self.drop <= self.max_drop else ">"
        line = (
            f"vlaeval gate: {word}: split SR {self.current_sr:.3f} vs baseline {self.baseline_sr:.3f} over "
            f"{len(self.tasks)} tasks (drop {self.drop:+.3f} {relation} {self.max_drop:.3f})"
        )
        if self.p_value is not None:
            b, c = self.discordant
            line += f"; McNemar exact p={self.p_value:.4g} on {b + c} discordant seeds ({b} lost, {c} gained)"
            if self.alpha is not None:
                line += f", alpha {self.alpha:g}"
        return line


def load_baseline(path: Path) -> dict[str, dict[str, Any]]:
    """Per-task results (env_id -> JSON) from a directory of canonical per-task files."""
    if not path.is_dir():
        raise FileNotFoundError(f"--vla-baseline {path}: not a directory")
    found = {}
    for file in sorted(path.glob("*.json")):
        data = json.loads(file.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "env_id" in data and "successes" in data:
            found[data["env_id"]] = data
    return found


def compare(per_task: list[dict[str, Any]], baseline_dir: Path, max_drop: float, alpha: float | None) -> GateResult:
    try:
        baseline = load_baseline(baseline_dir)
    except (OSError, ValueError) as exc:
        return GateResult(str(baseline_dir), max_drop, alpha, problem=f"cannot read the baseline: {exc}")
    tasks = []
    for current in per_task:
        base = baseline.get(current["env_id"])
        if base is None or not base["successes"]:
            continue
        mine = dict(zip(current["episode_seeds"], current["successes"], strict=True))
        theirs = dict(zip(base.get("episode_seeds", []), base["successes"], strict=False))  # seeds may be absent
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
    return GateResult(str(baseline_dir), max_drop, alpha, tasks)
