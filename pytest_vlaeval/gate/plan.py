"""What a gate can decide before it spends anything: the earliest look at which PASS and FAIL are
each possible, and the simulated chance of a correct verdict within a budget.

The simulator is the one ``scripts/gate_simulation.py`` runs over its grid of cells: known
per-task SRs and a latent per-seed difficulty shared by every task and both runs (the same seed
gives the same initial state), so tasks correlate as in the benchmark: episode (t, s) succeeds
when sqrt(rho) z_s + sqrt(1 - rho) e < Phi^-1(p_t), hence P(success) = p_t exactly. The plan's
profile is pessimistic: every task at SR 1/2 (the largest spread) and rho = ``PLAN_RHO``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from pytest_vlaeval.gate.sequential import BETTING, Method, running_bounds
from pytest_vlaeval.gate.verdict import FAIL, PASS, UNDECIDED, drop_verdict, min_sr_verdict

PLAN_RHO = 0.6
"""The correlation between tasks at a seed the plan assumes (the audit's cells go up to 0.8)."""
PLAN_REPS = 200
PLAN_BUDGETS = (10, 20, 30, 50, 75, 100, 150, 200, 300)
CHUNK = 100
"""Replications per batch of the betting sequence (it holds a grid x seeds array per replication)."""


@dataclass(frozen=True)
class Design:
    """One gate as the simulation runs it: ``threshold`` is max drop, or the min SR with ``min_sr``."""

    method: Method
    alpha: float
    block: int
    threshold: float
    min_sr: bool = False
    sequential: bool = True


def outcomes(
    rng: np.random.Generator, rates: Sequence[float], drops: Sequence[float], rho: float, seeds: int, reps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and current outcomes, shape (reps, tasks, seeds), sharing each seed's latent;
    task t's SR drops by ``drops[t]`` (clipped to [0, 1])."""
    normal = NormalDist()

    def thresholds(values: np.ndarray) -> np.ndarray:
        clipped = np.clip(values, 1e-9, 1 - 1e-9)
        return np.array([normal.inv_cdf(p) for p in clipped])[None, :, None]

    rates = np.asarray(rates, dtype=float)
    latent = math.sqrt(rho) * rng.standard_normal((reps, 1, seeds))
    shape = (reps, len(rates), seeds)
    noise = math.sqrt(1 - rho)
    base = latent + noise * rng.standard_normal(shape) < thresholds(rates)
    now = latent + noise * rng.standard_normal(shape) < thresholds(rates - np.asarray(drops, dtype=float))
    return base, now


def per_seed_values(base: np.ndarray, now: np.ndarray, min_sr: bool) -> np.ndarray:
    """What the gate looks at, shape (reps, seeds): per-seed drops, or per-seed means with ``min_sr``."""
    if min_sr:
        return now.mean(axis=1)
    return (base.astype(float) - now.astype(float)).mean(axis=1)


def look_ends(design: Design, seeds: int) -> list[int]:
    """The seeds seen at each look: after every block, the last one perhaps partial (once, at the end, for a fixed gate)."""
    if not design.sequential:
        return [seeds]
    return sorted({min(end, seeds) for end in range(design.block, seeds + design.block, design.block)})


def run(values: np.ndarray, design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Each replication's verdict and the share of its budget spent (looks after every block;
    a fixed gate looks once, at the end)."""
    reps, seeds = values.shape
    ends = look_ends(design, seeds)
    value_range = (0.0, 1.0) if design.min_sr else (-1.0, 1.0)
    lower, upper = _bounds(values, design, len(ends), value_range)
    judge = min_sr_verdict if design.min_sr else drop_verdict
    verdicts = np.full(reps, UNDECIDED, dtype=object)
    spent = np.ones(reps)
    open_ = np.ones(reps, dtype=bool)
    # The fixed gate: PASS unless FAIL, where FAIL is possible at all; else UNDECIDED, as in the session.
    fixed_default = PASS if not design.sequential and earliest(design, seeds)[1] is not None else UNDECIDED
    for end in ends:
        now = judge(lower[:, end - 1], upper[:, end - 1], design.threshold)
        if not design.sequential:
            now = np.where(now == UNDECIDED, fixed_default, now)
        settled = open_ & (now != UNDECIDED)
        verdicts[settled] = now[settled]
        spent[settled] = end / seeds
        open_ &= ~settled
    return verdicts, spent


def _bounds(
    values: np.ndarray, design: Design, looks: int, value_range: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    if design.method.name != BETTING:
        return running_bounds(values, design.method, design.alpha, looks, value_range)
    parts = [
        running_bounds(part, design.method, design.alpha, looks, value_range)
        for part in np.array_split(values, max(1, len(values) // CHUNK))
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def earliest(design: Design, seeds: int) -> tuple[int | None, int | None]:
    """The first look (in seeds) at which PASS and FAIL are each possible at all, within ``seeds``."""
    found = []
    value_range = (0.0, 1.0) if design.min_sr else (-1.0, 1.0)
    ends = look_ends(design, seeds)
    for verdict, value in ((PASS, 1.0 if design.min_sr else -1.0), (FAIL, 0.0 if design.min_sr else 1.0)):
        verdicts_by_look = []
        for end in ends:
            lower, upper = _bounds(np.full((1, end), value), design, len(ends), value_range)
            judge = min_sr_verdict if design.min_sr else drop_verdict
            verdicts_by_look.append((end, judge(lower[0, -1], upper[0, -1], design.threshold)))
        found.append(next((end for end, v in verdicts_by_look if v == verdict), None))
    return found[0], found[1]


def chance_of_deciding(design: Design, tasks: int, seeds: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Under the plan's profile: for a true change of none and of twice the threshold's margin
    (a drop of 2 x max drop, or an SR of min SR -/+ 0.1), the share of correct verdicts and the
    mean share of the budget spent."""
    rng = np.random.default_rng(seed)
    rates = [0.5] * tasks
    results = {}
    for label, change, correct in _scenarios(design):
        base, now = outcomes(rng, rates, [change] * tasks, PLAN_RHO, seeds, PLAN_REPS)
        verdicts, spent = run(per_seed_values(base, now, design.min_sr), design)
        results[label] = (float(np.mean(verdicts == correct)), float(spent.mean()))
    return results


def _scenarios(design: Design) -> list[tuple[str, float, str]]:
    """(label, the change to every task's SR of 1/2, the correct verdict) of the two planned cases."""
    if design.min_sr:
        above, below = min(design.threshold + 0.1, 1.0), max(design.threshold - 0.1, 0.0)
        return [(f"true SR {above:.2f}", 0.5 - above, PASS), (f"true SR {below:.2f}", 0.5 - below, FAIL)]
    return [("true drop 0", 0.0, PASS), (f"true drop {2 * design.threshold:g}", 2 * design.threshold, FAIL)]


def start_lines(design: Design, tasks: int, seeds: int) -> list[str]:
    """What the gate says when the session starts: when it can first decide, and its chances."""
    first_pass, first_fail = earliest(design, seeds)
    never = "not within this budget"
    head = (
        f"vlaeval gate plan: {design.method.name} ({design.method.reason}); earliest PASS at "
        f"{never if first_pass is None else f'{first_pass} seeds'}, earliest FAIL at "
        f"{never if first_fail is None else f'{first_fail} seeds'} of {seeds}"
    )
    chances = chance_of_deciding(design, tasks, seeds)
    odds = "; ".join(f"{label}: correct {c:.0%}, budget spent {s:.2f}" for label, (c, s) in chances.items())
    return [head, f"vlaeval gate plan: simulated (SRs 0.5, rho {PLAN_RHO:g}): {odds}"]


def budget_table(design_for: Callable[[int], Design], tasks: int, probability: float = 0.8) -> list[str]:
    """``--vla-gate-plan``: per budget, the chance of a correct verdict in each scenario, and the
    smallest budget reaching ``probability`` in both. ``design_for(seeds)`` gives the gate's design there."""
    lines = ["| seeds | method | " + " | ".join(label for label, *_ in _scenarios(design_for(10))) + " |"]
    lines.append("| ---: | --- |" + " ---: |" * len(_scenarios(design_for(10))))
    enough = None
    for seeds in PLAN_BUDGETS:
        design = design_for(seeds)
        chances = chance_of_deciding(design, tasks, seeds)
        cells = " | ".join(f"correct {c:.0%}, spent {s:.2f}" for c, s in chances.values())
        lines.append(f"| {seeds} | {design.method.name} | {cells} |")
        if enough is None and all(c >= probability for c, _ in chances.values()):
            enough = seeds
    verdict = (
        f"decides correctly with probability >= {probability:.0%} in both from --episodes={enough}"
        if enough
        else f"no budget up to {PLAN_BUDGETS[-1]} seeds decides with probability {probability:.0%} in both"
    )
    return [*lines, f"vlaeval gate plan: {tasks} tasks: {verdict}"]
