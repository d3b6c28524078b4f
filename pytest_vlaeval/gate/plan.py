"""What a gate can decide before it spends anything: the earliest look at which PASS and FAIL are
each possible, and the simulated chance of a correct verdict within a budget.

The simulator is the one ``scripts/gate_simulation.py`` runs over its grid of cells: known
per-task SRs and a latent per-seed difficulty shared by every task and both runs (the same seed
gives the same initial state), so tasks correlate as in the benchmark: episode (t, s) succeeds
when sqrt(rho) z_s + sqrt(1 - rho) e < Phi^-1(p_t), hence P(success) = p_t exactly
(``seed_model``). What it simulates (``Profile``) is what the gate can know:

- against a baseline, the baseline's own task SRs, and its seed correlation at both ends of what
  its per-seed means allow (``seed_model.seed_correlation``; anywhere in 0 to 0.95 with one task,
  whose per-seed means vary alike at any correlation), reporting the worse end per scenario first
  and the other where they differ (``Chance``): for a paired drop a weak correlation is the
  pessimistic case when nothing changed (the seed's shared difficulty no longer cancels) and a
  strong one when the policy got worse (the drop falls on a few hard seeds);
- with a min SR and no data, every task at the scenario's SR and rho = ``MIN_SR_PLAN_RHO``, the
  pessimistic end for a one-sample mean (the seeds move all tasks together).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pytest_vlaeval.gate.methods import Method, pass_rests_on
from pytest_vlaeval.gate.seed_model import MIN_SEED_MEANS, seed_correlation, thresholds
from pytest_vlaeval.gate.verdict import FAIL, PASS, UNDECIDED, drop_verdict, min_sr_verdict

if TYPE_CHECKING:
    from pytest_vlaeval.gate.baseline import Baseline

PLAN_RHO_LEVEL = 0.25
"""One-sided level of each end of the baseline's seed correlation the plan tries (the middle half of
what its seeds allow): the 10% ends the gate's floor takes made the plan 30 points too pessimistic
where a drop's cost rests on the correlation (SRs near 1, strong correlation, ``scripts/gate_check.py``)."""
MIN_SR_PLAN_RHO = 0.8
"""The seed correlation the plan assumes with a min SR and no data (the simulation's cells go up to 0.8)."""
PLAN_REPS = 200
PLAN_BUDGETS = (10, 20, 30, 50, 75, 100, 150, 200, 300)
RANGE_SHOWN = 0.1
"""Where the two ends of the correlation differ by this much in a figure (correct verdicts, budget spent), the plan gives both."""


@dataclass(frozen=True)
class Design:
    """One gate as the simulation runs it: ``threshold`` is max drop, or the min SR with ``min_sr``."""

    method: Method
    alpha: float
    block: int
    threshold: float
    min_sr: bool = False
    sequential: bool = True


@dataclass(frozen=True)
class Profile:
    """The benchmark the plan simulates: task SRs, the seed correlations to try (the plan reports
    the worse first, per scenario), and what that assumes, in words for the plan's line."""

    srs: tuple[float, ...]
    rhos: tuple[float, ...]
    assumed: str

    @property
    def tasks(self) -> int:
        return len(self.srs)


def baseline_profile(baseline: Baseline) -> Profile:
    """The baseline's task SRs (each smoothed by one success and one failure over its own episodes,
    so none is exactly 0 or 1) and both ends of its seed correlation."""
    srs = np.asarray(baseline.srs())
    episodes = np.asarray([len(o) for o in baseline.outcomes.values()])
    means = np.asarray(baseline.seed_means())
    low, high = (float(seed_correlation(means, srs, end, PLAN_RHO_LEVEL)) for end in ("lower", "upper"))
    if len(srs) < 2:
        known = f"seed correlation anywhere in {low:g} to {high:.2f} (one task cannot show it)"
    elif len(means) >= MIN_SEED_MEANS:
        known = f"seed correlation {low:.2f} to {high:.2f} (its {len(means)} seeds' middle half)"
    else:
        known = f"seed correlation anywhere in {low:g} to {high:.2f} (its {len(means)} seeds say too little)"
    smoothed = (srs * episodes + 1) / (episodes + 2)
    assumed = f"the baseline's {len(srs)} task SRs (mean {srs.mean():.2f}) and {known}, the worse end first"
    return Profile(tuple(smoothed.tolist()), (low, high), assumed)


def min_sr_profile(tasks: int) -> Profile:
    return Profile(
        (0.5,) * tasks,
        (MIN_SR_PLAN_RHO,),
        f"every task at the case's SR, seed correlation {MIN_SR_PLAN_RHO:g} (the pessimistic end for a min SR)",
    )


def outcomes(
    rng: np.random.Generator,
    rates: Sequence[float],
    drops: Sequence[float],
    rho: float,
    seeds: int,
    reps: int,
    shared_baseline: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and current outcomes, shape (reps, tasks, seeds), sharing each seed's latent;
    task t's SR drops by ``drops[t]`` (clipped to [0, 1]). With ``shared_baseline``, one baseline
    (shape (1, tasks, seeds)) and ``reps`` current runs on its seeds, as a CI job meets them: one
    committed baseline, then run after run against it."""
    rates = np.asarray(rates, dtype=float)
    baselines = 1 if shared_baseline else reps
    latent = math.sqrt(rho) * rng.standard_normal((baselines, 1, seeds))
    noise = math.sqrt(1 - rho)
    base = latent + noise * rng.standard_normal((baselines, len(rates), seeds)) < thresholds(rates)[None, :, None]
    now_levels = thresholds(rates - np.asarray(drops, dtype=float))[None, :, None]
    now = latent + noise * rng.standard_normal((reps, len(rates), seeds)) < now_levels
    return base, now


def spread_drop(drop: float, srs: np.ndarray, hit: np.ndarray | None = None) -> np.ndarray:
    """Each task's drop, averaging ``drop`` over all tasks, taken by the tasks in ``hit`` (all by
    default). A task cannot drop below 0: what it cannot take is shared equally by those that still
    can, so a near-0 task does not shrink a case's true drop while others can take it."""
    srs = np.asarray(srs, dtype=float)
    hit = np.ones(len(srs), dtype=bool) if hit is None else hit
    drops = np.zeros(len(srs))
    left = drop * len(srs)
    while left > 1e-12:
        open_ = hit & (drops < srs - 1e-12)
        if not open_.any():
            break
        share = np.minimum(left / open_.sum(), srs - drops)
        drops[open_] += share[open_]
        left -= share[open_].sum()
    return drops


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
    batch = design.method.batch or len(values)
    parts = [
        design.method.bounds(part, design.alpha, looks, value_range)
        for part in np.array_split(values, max(1, len(values) // batch))
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


@dataclass(frozen=True)
class Chance:
    """One planned case: (share of correct verdicts, mean share of the budget spent) at the end of
    the profile's seed correlation where fewer verdicts are correct, and at the other end. Where
    the baseline cannot narrow the correlation (few tasks: the seed moves both runs of one task
    alike, which one run cannot show) the two differ, and the plan says both."""

    worse: tuple[float, float]
    other: tuple[float, float]

    @property
    def correct(self) -> float:
        return self.worse[0]

    def text(self, spent: str) -> str:
        correct = " to ".join(f"{end:.0%}" for end in shown_ends(self.worse[0], self.other[0]))
        share = " to ".join(f"{end:.2f}" for end in shown_ends(self.worse[1], self.other[1]))
        return f"correct {correct}, {spent} {share}"


def shown_ends(worse: float, other: float) -> tuple[float, ...]:
    """The ends of one planned figure the plan prints: the worse, and the other where they differ
    by ``RANGE_SHOWN`` or more."""
    return (worse,) if abs(other - worse) < RANGE_SHOWN else (worse, other)


def chance_of_deciding(design: Design, profile: Profile, seeds: int, seed: int = 0) -> dict[str, Chance]:
    """Under ``profile``: for a true change of none and of twice the threshold's margin (a drop of
    2 x max drop, or an SR of min SR -/+ 0.1; against a baseline, that drop also on whole seeds),
    the share of correct verdicts and the mean share of the budget spent at each end of the
    profile's correlation, the worse end first."""
    rng = np.random.default_rng(seed)
    results = {}
    for label, change, correct, broken in _scenarios(design, profile):
        found = []
        for rho in profile.rhos:
            base, now = outcomes(rng, profile.srs, change, rho, seeds, PLAN_REPS)
            now = now & ~(rng.random((PLAN_REPS, 1, seeds)) < broken)
            verdicts, spent = run(per_seed_values(base, now, design.min_sr), design)
            found.append((float(np.mean(verdicts == correct)), float(spent.mean())))
        ordered = sorted(found, key=lambda chance: (chance[0], -chance[1]))
        results[label] = Chance(ordered[0], ordered[-1])
    return results


WHOLE_SEEDS = "on whole seeds"
"""The planned case of a drop that falls on whole seeds: the current policy fails every task on a
share of the seeds and is unchanged elsewhere, outside the latent-seed model. Such a drop is far
harder to see than one spread over the seeds (its per-seed values are 0 or the seed's whole SR),
and no baseline tells which form a regression will take, so the plan says both."""


def _scenarios(design: Design, profile: Profile) -> list[tuple[str, np.ndarray, str, float]]:
    """(label, each task's drop, the correct verdict, the share of broken seeds) of the planned
    cases: the first two decide the recommended budget."""
    srs = np.asarray(profile.srs)
    if design.min_sr:  # every task moved to the case's SR
        above, below = min(design.threshold + 0.1, 1.0), max(design.threshold - 0.1, 0.0)
        return [(f"true SR {above:.2f}", srs - above, PASS, 0.0), (f"true SR {below:.2f}", srs - below, FAIL, 0.0)]
    drop = 2 * design.threshold
    none = np.zeros(len(srs))
    return [
        ("true drop 0", none, PASS, 0.0),
        (f"true drop {drop:g}", spread_drop(drop, srs), FAIL, 0.0),
        (f"true drop {drop:g} {WHOLE_SEEDS}", none, FAIL, min(1.0, drop / max(float(srs.mean()), 1e-9))),
    ]


def start_lines(design: Design, profile: Profile, seeds: int) -> list[str]:
    """What the gate says when the session starts: when it can first decide, and its chances."""
    first_pass, first_fail = earliest(design, seeds)
    never = "not within this budget"
    head = (
        f"vlaeval gate plan: {design.method.name} ({design.method.reason}); earliest PASS at "
        f"{never if first_pass is None else f'{first_pass} seeds'}, earliest FAIL at "
        f"{never if first_fail is None else f'{first_fail} seeds'} of {seeds}"
    )
    chances = chance_of_deciding(design, profile, seeds)
    odds = "; ".join(f"{label}: {chance.text('budget spent')}" for label, chance in chances.items())
    return [head, f"vlaeval gate plan: simulated at {profile.assumed}: {odds}", *_rests_on(design)]


def _rests_on(design: Design) -> list[str]:
    """The plan's line on what a PASS assumes: a sequential gate's PASS is a claim at level alpha
    (a fixed gate's PASS says only that no significant drop showed)."""
    if not design.sequential:
        return []
    return [f"vlaeval gate plan: {pass_rests_on(design.method, design.alpha, design.threshold, design.min_sr)}"]


def budget_table(
    design_for: Callable[[int], Design],
    profile: Profile,
    probability: float = 0.8,
    baseline_seeds: int | None = None,
) -> list[str]:
    """``--vla-gate-plan``: per budget, the chance of a correct verdict in each scenario, and the
    smallest budget reaching ``probability`` in both main ones (at the worse end) under ``profile``,
    and apart, for a drop on whole seeds.
    ``design_for(seeds)`` gives the gate's design there; ``baseline_seeds``, how many of the first
    ``PLAN_BUDGETS[-1]`` seeds from the run's start seed the baseline pairs (a larger budget needs a
    baseline of as many)."""
    labels = [label for label, *_ in _scenarios(design_for(PLAN_BUDGETS[0]), profile)]
    lines = [f"vlaeval gate plan: simulated at {profile.assumed}"]
    short = baseline_seeds is not None and baseline_seeds < PLAN_BUDGETS[-1]
    if short:
        lines.append(
            f"vlaeval gate plan: the baseline pairs {baseline_seeds} of the first {PLAN_BUDGETS[-1]} seeds from this "
            f"run's start seed; the rows above {baseline_seeds} seeds assume a baseline of as many"
        )
    lines.append("| seeds | method | " + " | ".join(labels) + " |")
    lines.append("| ---: | --- |" + " ---: |" * len(labels))
    enough = whole = None
    for seeds in PLAN_BUDGETS:
        design = design_for(seeds)
        chances = list(chance_of_deciding(design, profile, seeds).values())
        cells = " | ".join(chance.text("spent") for chance in chances)
        lines.append(f"| {seeds} | {design.method.name} | {cells} |")
        if enough is None and all(chance.correct >= probability for chance in chances[:2]):
            enough = seeds
        if whole is None and len(chances) > 2 and chances[2].correct >= probability:
            whole = seeds
    verdict = (
        f"decides correctly with probability >= {probability:.0%} in both from --episodes={enough}"
        if enough
        else f"no budget up to {PLAN_BUDGETS[-1]} seeds decides with probability {probability:.0%} in both"
    )
    if short and enough and enough > baseline_seeds:
        verdict += (
            f", with a baseline of as many seeds (this one pairs {baseline_seeds}: rerun it with --episodes={enough})"
        )
    if len(labels) > 2:
        at = f"from --episodes={whole}" if whole else f"not within {PLAN_BUDGETS[-1]} seeds"
        verdict += f"; {labels[2]}: {at}"
    tasks = f"{profile.tasks} task{'s' if profile.tasks != 1 else ''}"
    last = design_for(enough or PLAN_BUDGETS[-1])
    return [*lines, f"vlaeval gate plan: {tasks}: {verdict}", *_rests_on(last)]
