"""How often each gate gives a wrong verdict, how often it decides, and what it spends.

Simulated runs come from ``pytest_vlaeval.gate.plan.outcomes``: known per-task SRs and a latent
per-seed difficulty shared by every task and both runs, so tasks correlate through the seed as
in the benchmark (correlation rho). The current run's task SRs are the baseline's minus a drop.

Modes: ``drop`` gates against a baseline with max drop M; ``min_sr`` gates the current run
alone against min SR = (the profile's mean SR) - M, so in both a verdict is wrong when it says
FAIL while the split SR dropped by at most M, or PASS while it dropped by more. UNDECIDED is
never wrong. Methods: ``betting`` and ``t_test`` (each forced, sequential; the forced t test with
the plain floor ``variance_floor`` alone, to show where it fails), ``auto`` (the
sequential gate's own rule: ``sequential.drop_method`` on each simulated baseline's outcomes, or in
``min_sr`` mode ``sequential.method_for`` at every look on the task SRs observed so far, as the
gate does), and
``fixed`` (the fixed gate: its rule, one look at the end; PASS unless FAIL or it cannot FAIL;
its PASS claims no more than "no significant regression", so only its FAILs can be wrong); and,
not a gate, ``oracle``: the z test knowing the cell's per-seed variance, one look at the whole budget,
a reference for what the cell allows (not a bound).

Cells: tasks {1, 2, 3, 10, 38} x seeds {5, 10, 20, 50} x rho {0, 0.3, 0.6, 0.8} x SR profiles
(``mid``: U(0.35, 0.95); ``extreme``: half the tasks near 0, half near 1; ``high``: near 1) x
drops {0, M, M + 0.01, 2M, 0.3, and 2M spread unevenly over a third of the tasks}. Then the
coverage of the split-SR interval (``stats.seed_clustered_interval``), 38 tasks.

    python scripts/gate_simulation.py [--quick | --smoke] [--reps N] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

from pytest_vlaeval.choices import SMOOTH_SEEDS
from pytest_vlaeval.gate import plan, seed_model
from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.methods import (
    MIN_SEEDS,
    OBSERVED,
    TTest,
    betting_bounds,
    broken_seed_bounds,
    drop_method,
    method_for,
    pocock_level,
    t_bounds,
    variance_floor,
)
from pytest_vlaeval.gate.stats import seed_clustered_interval
from pytest_vlaeval.gate.verdict import FAIL, PASS, UNDECIDED, drop_verdict, min_sr_verdict

BLOCK = 5
"""Seeds per block, the sequential gate's default (``--block``)."""
TASKS = (1, 2, 3, 10, 38)
SEEDS = (5, 10, 20, 50)
RHOS = (0.0, 0.3, 0.6, 0.8)
PROFILES = ("mid", "extreme", "high")
PLAN_TASKS = (1, 3, 10, 38)
PLAN_RHOS = (0.0, 0.2, 0.4, 0.6, 0.8)
METHODS = ("betting", "t_test", "auto", "auto_smooth", "fixed")
BROKEN_SHARES = (0.02, 0.05, 0.08, 0.12, 0.2)
"""The broken-seed family's shares q of broken seeds."""
BROKEN = ("broken-all", "broken-each")
"""Regressions the latent-seed model does not describe: the current policy fails every task on a
share q of the seeds (``broken-all``), or each task on its own share q of them (``broken-each``),
and is unchanged elsewhere."""
ORACLE = "oracle"
"""Not a gate but a reference: the z test that knows the cell's per-seed variance (``seed_model``) and
looks once, at the whole budget. Not a bound: where the per-seed values are skewed a test on their
observed variance can do better, and where the normal approximation fails it errs more than alpha."""
PLAN_TOLERANCE = 0.1
"""The plan-check's target: what happens within this of the plan (of its range, where it prints one)."""


def profile_rates(rng: np.random.Generator, profile: str, tasks: int) -> np.ndarray:
    """Baseline task SRs."""
    if profile == "mid":
        return rng.uniform(0.35, 0.95, tasks)
    if profile == "high":
        return rng.uniform(0.92, 0.98, tasks)
    low = rng.uniform(0.02, 0.1, tasks)
    high = rng.uniform(0.9, 0.98, tasks)
    return np.where(np.arange(tasks) % 2 == 0, high, low)


def task_drops(drop: float, rates: np.ndarray, uneven: bool) -> np.ndarray:
    """Each task's drop, averaging ``drop``: over all tasks, or all of it on a third of them
    (``plan.spread_drop``: what a near-0 task cannot take goes to the others)."""
    tasks = len(rates)
    return plan.spread_drop(drop, rates, np.arange(tasks) < (max(1, tasks // 3) if uneven else tasks))


def judge(values: np.ndarray, lower: np.ndarray, upper: np.ndarray, ends: list[int], threshold: float, min_sr: bool):
    """Verdicts and share of the budget spent, taking looks at ``ends`` (seeds)."""
    reps, seeds = values.shape
    verdict_of = min_sr_verdict if min_sr else drop_verdict
    verdicts = np.full(reps, UNDECIDED, dtype=object)
    spent = np.ones(reps)
    open_ = np.ones(reps, dtype=bool)
    for end in ends:
        now = verdict_of(lower[:, end - 1], upper[:, end - 1], threshold)
        settled = open_ & (now != UNDECIDED)
        verdicts[settled] = now[settled]
        spent[settled] = end / seeds
        open_ &= ~settled
    return verdicts, spent


def cell(
    rng, tasks, seeds, rho, profile, drop, kind, mode, reps, max_drop, alpha, block
) -> tuple[dict[str, tuple], float]:
    """Each method's (wrong, correct, undecided, budget spent) in one cell, and the cell's true drop.
    ``kind``: ``even`` or ``uneven`` (a drop of ``drop`` by the latent-seed model, over every task or
    a third of them), or one of ``BROKEN`` (``drop`` is then the share of broken seeds)."""
    rates = profile_rates(rng, profile, tasks)
    drops = task_drops(drop, rates, kind == "uneven") if kind not in BROKEN else np.zeros(tasks)
    base, now = plan.outcomes(rng, rates, drops, rho, seeds, reps)
    if kind in BROKEN:  # broken seeds are drawn at random, whatever their difficulty
        broken = rng.random((reps, 1 if kind == "broken-all" else tasks, seeds)) < drop
        now = now & ~broken
        drops = drop * rates
    min_sr = mode == "min_sr"
    values = plan.per_seed_values(base, now, min_sr)
    value_range = (0.0, 1.0) if min_sr else (-1.0, 1.0)
    low, high = value_range
    threshold = float(rates.mean() - max_drop) if min_sr else max_drop
    true_drop = float(drops.mean())
    regressed = true_drop > max_drop + 1e-12
    ends = sorted({min(end, seeds) for end in range(block, seeds + block, block)})
    # What the forced t test assumes, per replication: the realised baseline's task SRs, or the min SR.
    reference = np.full((reps, tasks), min(max(threshold, 0.0), 1.0)) if min_sr else base.mean(axis=2)
    floors = np.array([[variance_floor(list(srs), seeds)] for srs in reference])
    chosen, auto_floors = rule(base, now, ends, min_sr, max_drop)

    parts = [betting_bounds((p - low) / (high - low), alpha) for p in np.array_split(values, max(1, reps // 100))]
    bet_lower = low + (high - low) * np.concatenate([p[0] for p in parts])
    bet_upper = low + (high - low) * np.concatenate([p[1] for p in parts])

    def t_test(looks: int, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lower, upper = t_bounds(values, pocock_level(looks, alpha), floor, value_range)
        early = np.arange(seeds) < MIN_SEEDS - 1
        return np.where(early, low, lower), np.where(early, high, upper)

    t_lower, t_upper = t_test(len(ends), floors)
    smooth_lower, smooth_upper = t_test(len(ends), auto_floors)
    # The default rule's t test carries the broken-seed guard: against each replication's baseline split SR.
    broken_drop = None if min_sr else base.mean(axis=(1, 2))[:, None]
    auto_lower, auto_upper = broken_seed_bounds(values, smooth_lower, smooth_upper, alpha, broken_drop, auto_floors)
    fixed_lower, fixed_upper = t_test(1, auto_floors)
    known = seed_model.run_variance(rates - drops, rho) if min_sr else seed_model.paired_variance(rates, drops, rho)
    half = NormalDist().inv_cdf(1 - alpha) * math.sqrt(float(known) / seeds)
    mean = values.mean(axis=1, keepdims=True)
    oracle_lower = np.broadcast_to(np.clip(mean - half, low, high), values.shape)
    oracle_upper = np.broadcast_to(np.clip(mean + half, low, high), values.shape)
    verdicts, _ = judge(values, oracle_lower, oracle_upper, [seeds], threshold, min_sr)
    results = {
        ORACLE: (
            float(np.mean(verdicts == (FAIL if not regressed else PASS))),
            float(np.mean(verdicts == (FAIL if regressed else PASS))),
            float(np.mean(verdicts == UNDECIDED)),
            1.0,
        )
    }
    for method in METHODS:
        if method == "betting":
            lower, upper = bet_lower, bet_upper
        elif method == "t_test":
            lower, upper = t_lower, t_upper
        elif method == "auto":
            lower, upper = np.where(chosen, auto_lower, bet_lower), np.where(chosen, auto_upper, bet_upper)
        elif method == "auto_smooth":
            lower, upper = np.where(chosen, smooth_lower, bet_lower), np.where(chosen, smooth_upper, bet_upper)
        else:
            lower, upper = np.where(chosen, fixed_lower, bet_lower), np.where(chosen, fixed_upper, bet_upper)
        verdicts, spent = judge(values, lower, upper, ends if method != "fixed" else [seeds], threshold, min_sr)
        if method == "fixed":
            can_fail = _fixed_can_fail(chosen[:, -1], seeds, floors, alpha, threshold, min_sr)
            verdicts = np.where(verdicts == UNDECIDED, np.where(can_fail, PASS, UNDECIDED), verdicts)
        # The fixed gate's PASS claims only "no significant regression": its one controlled error
        # is a FAIL at a drop of max drop or less (a PASS above max drop is a miss, not counted).
        wrong_verdict = FAIL if method == "fixed" or not regressed else PASS
        wrong = float(np.mean(verdicts == wrong_verdict)) if not (method == "fixed" and regressed) else 0.0
        correct = float(np.mean(verdicts == (FAIL if regressed else PASS)))
        results[method] = (wrong, correct, float(np.mean(verdicts == UNDECIDED)), float(spent.mean()))
    return results, true_drop


def rule(
    base: np.ndarray, now: np.ndarray, ends: list[int], min_sr: bool, max_drop: float
) -> tuple[np.ndarray, np.ndarray]:
    """Where the gate's rule picks the t test and the floor it gives it, shape (reps, seeds) (read
    at the looks): chosen once on the baseline's outcomes (``drop_method``), or at each look on the
    current run's task SRs (``method_for``). The guard is applied apart (``cell``)."""
    reps, _, seeds = now.shape
    chosen, floors = np.zeros((reps, seeds), dtype=bool), np.zeros((reps, seeds))
    if not min_sr:
        for rep in range(reps):
            srs, means = base[rep].mean(axis=1).tolist(), base[rep].mean(axis=0).tolist()
            method = drop_method(srs, means, seeds, max_drop, SMOOTH_SEEDS)
            chosen[rep], floors[rep] = isinstance(method, TTest), getattr(method, "floor", 0.0)
        return chosen, floors
    for end in ends:
        for rep, row in enumerate(now[:, :, :end].mean(axis=2).tolist()):
            method = method_for(row, seeds, OBSERVED, SMOOTH_SEEDS)
            chosen[rep, end - 1], floors[rep, end - 1] = isinstance(method, TTest), getattr(method, "floor", 0.0)
    return chosen, floors


def _fixed_can_fail(chosen, seeds, floors, alpha, threshold, min_sr) -> np.ndarray:
    """Whether the fixed gate could FAIL at all with ``seeds`` (the most adverse data)."""
    worst = np.full((1, seeds), 0.0 if min_sr else 1.0)
    value_range = (0.0, 1.0) if min_sr else (-1.0, 1.0)
    low, high = value_range
    results = []
    for use_t, floor in ((False, 0.0), (True, float(floors.min()))):
        if use_t:
            lower, upper = t_bounds(worst, alpha, floor, value_range)
            if seeds < MIN_SEEDS:
                lower, upper = np.full_like(lower, low), np.full_like(upper, high)
        else:
            lower, upper = betting_bounds((worst - low) / (high - low), alpha)
            lower, upper = low + (high - low) * lower, low + (high - low) * upper
        verdict = (min_sr_verdict if min_sr else drop_verdict)(lower[0, -1], upper[0, -1], threshold)
        results.append(verdict == FAIL)
    return np.where(chosen, results[1], results[0])


def coverage(rng: np.random.Generator, reps: int, seeds_list, rhos, profiles) -> list[dict]:
    """How often the split-SR interval covers the true split SR (38 tasks)."""
    rows = []
    for seeds, rho, (name, top) in itertools.product(seeds_list, rhos, profiles):
        rates = rng.uniform(0.0, top, 38)
        base, _ = plan.outcomes(rng, rates, np.zeros(38), rho, seeds, reps)
        covered = 0
        for rep in range(reps):
            tasks = [dict(enumerate(row.tolist())) for row in base[rep]]
            low, high = seed_clustered_interval(tasks)
            covered += low <= rates.mean() <= high
        rows.append({"seeds": seeds, "rho": rho, "profile": name, "coverage": covered / reps, "reps": reps})
    return rows


TRUTHS = ("model", "additive", "per-task", "broken")
"""What the plan-check draws the runs from: the plan's own latent-seed model, or a policy outside it
(``truth_outcomes``)."""
ADDITIVE_LEVELS = np.array((-0.3, -0.15, 0.0, 0.15, 0.3))
"""The ``additive`` truth's seed effects on the success probability, equally likely, shared by every task."""


def truth_outcomes(
    rng: np.random.Generator, truth: str, rates: np.ndarray, drop: float, rho: float, seeds: int, runs: int
) -> tuple[np.ndarray, np.ndarray]:
    """One baseline (shape (1, tasks, seeds)) and ``runs`` current runs on its seeds whose split SR is
    ``drop`` below it, drawn from ``truth``: ``model``, the latent-seed model (seed effects shared by
    every task, correlation rho); ``additive``, a seed adds one of ``ADDITIVE_LEVELS`` to every task's
    success probability (clipped to [0, 1]; rho unused); ``per-task``, every task has seed effects of
    its own (correlation rho between the runs of one task, none between tasks); ``broken``, the
    latent-seed model with no smooth drop, the current policy failing every task on a share of the
    seeds that makes the drop."""
    tasks = len(rates)
    if truth in ("model", "broken"):
        smooth = task_drops(drop, rates, False) if truth == "model" else np.zeros(tasks)
        base, now = plan.outcomes(rng, rates, smooth, rho, seeds, runs, shared_baseline=True)
        if truth == "broken":
            now = now & ~(rng.random((runs, 1, seeds)) < min(1.0, drop / rates.mean()))
        return base, now
    if truth == "per-task":
        latent = math.sqrt(rho) * rng.standard_normal((1, tasks, seeds))
        noise = math.sqrt(1 - rho)
        levels = seed_model.thresholds(rates)[None, :, None]
        now_levels = seed_model.thresholds(rates - task_drops(drop, rates, False))[None, :, None]
        base = latent + noise * rng.standard_normal((1, tasks, seeds)) < levels
        return base, latent + noise * rng.standard_normal((runs, tasks, seeds)) < now_levels
    shift = _additive_shift(tuple(rates.tolist()), drop)
    effect = rng.choice(ADDITIVE_LEVELS, size=(1, 1, seeds))
    base = rng.random((1, tasks, seeds)) < np.clip(rates[None, :, None] + effect, 0, 1)
    now = rng.random((runs, tasks, seeds)) < np.clip((rates - shift)[None, :, None] + effect, 0, 1)
    return base, now


@functools.cache
def _additive_shift(rates: tuple[float, ...], drop: float) -> np.ndarray:
    """Each task's shift under the ``additive`` truth whose split SR drop, after the clipping, is ``drop``."""
    rates_ = np.asarray(rates)

    def realised(nominal: float) -> float:
        shift = plan.spread_drop(nominal, rates_)
        before = np.clip(rates_[:, None] + ADDITIVE_LEVELS, 0, 1)
        after = np.clip((rates_ - shift)[:, None] + ADDITIVE_LEVELS, 0, 1)
        return float((before - after).mean())

    low, high = drop, min(1.0, 4 * drop + 0.3)
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if realised(middle) < drop else (low, middle)
    return plan.spread_drop(high, rates_)


def plan_check(
    rng: np.random.Generator,
    tasks_list,
    rhos,
    profiles,
    seeds: int,
    md: float,
    alpha: float,
    baselines: int,
    runs: int,
    block: int = BLOCK,
    truth: str = "model",
) -> list[dict]:
    """The plan against what happens: per cell, ``baselines`` baselines drawn from ``truth``; from
    each, the gate's plan (as the session prints it: the worse end of the correlation, and the other
    where they differ) and ``runs`` current runs gated against it; the plan's mean prediction beside
    the share of correct verdicts and the mean budget spent (with its standard error over the
    baselines)."""
    rows = []
    for tasks, rho, profile in itertools.product(tasks_list, rhos if truth != "additive" else (0.0,), profiles):
        rates = profile_rates(rng, profile, tasks)
        cases = [("true drop 0", 0.0, PASS), (f"true drop {2 * md:g}", 2 * md, FAIL)]
        if truth == "broken":  # what the plan says of a drop on whole seeds
            cases = [(f"true drop {2 * md:g} {plan.WHOLE_SEEDS}", 2 * md, FAIL)]
        for label, drop, correct in cases:
            predicted, realised = [], []
            for _ in range(baselines):
                (base,), now = truth_outcomes(rng, truth, rates, drop, rho, seeds, runs)
                baseline = Baseline(Path("."), {f"t{t}": dict(enumerate(row.tolist())) for t, row in enumerate(base)})
                design = plan.Design(baseline.method(seeds, md), alpha, block, md)
                chance = plan.chance_of_deciding(design, plan.baseline_profile(baseline), seeds)[label]
                predicted.append((*chance.worse, *chance.other))
                verdicts, spent = plan.run(base.mean(axis=0) - now.mean(axis=1), design)
                realised.append((float(np.mean(verdicts == correct)), float(spent.mean())))
            worse_correct, worse_spent, other_correct, other_spent = np.mean(predicted, axis=0).tolist()
            real_correct, real_spent = np.mean(realised, axis=0).tolist()
            correct_se = float(np.std([r[0] for r in realised], ddof=1) / math.sqrt(baselines))
            within = all(
                min(ends) - PLAN_TOLERANCE <= real <= max(ends) + PLAN_TOLERANCE
                for ends, real in (
                    (plan.shown_ends(worse_correct, other_correct), real_correct),
                    (plan.shown_ends(worse_spent, other_spent), real_spent),
                )
            )
            rows.append(
                {"truth": truth, "tasks": tasks, "rho": rho, "profile": profile, "case": label,
                 "plan_correct": worse_correct,
                 "plan_correct_other": other_correct, "plan_spent": worse_spent, "plan_spent_other": other_spent,
                 "correct": real_correct, "correct_se": correct_se, "spent": real_spent, "within": within,
                 "sessions": baselines * runs}
            )  # fmt: skip
            print(
                f"| {truth} | {tasks} | {rho:g} | {profile} | {label} | {_span(worse_correct, other_correct)} | "
                f"{real_correct:.2f} +- {correct_se:.2f} | {_span(worse_spent, other_spent)} | {real_spent:.2f} | "
                f"{'yes' if within else 'no'} |",
                flush=True,
            )
    return rows


def _span(worse: float, other: float) -> str:
    """A plan's figure as the session prints it: one number, or both ends where they differ."""
    return " to ".join(f"{end:.2f}" for end in plan.shown_ends(worse, other))


def _numbers(value: str) -> tuple[float, ...]:
    return tuple(float(v) for v in value.split(","))


def se(rate: float, reps: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="200 replications per cell")
    size.add_argument("--smoke", action="store_true", help="a few cells, one small batch: a few seconds")
    parser.add_argument("--reps", type=int, help="replications per cell [1000; 200 --quick; 40 --smoke]")
    parser.add_argument("--max-drop", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block", type=int, default=BLOCK, help=f"seeds per block (the gate's --vla-block) [{BLOCK}]")
    parser.add_argument("--json", metavar="FILE", help="write every cell as JSON")
    parser.add_argument("--tasks", type=_numbers, help="only these task counts, e.g. 10,38")
    parser.add_argument("--seeds", type=_numbers, help="only these seed budgets")
    parser.add_argument("--rhos", type=_numbers, help="only these correlations")
    parser.add_argument("--profiles", type=lambda v: tuple(v.split(",")), help=f"only these of {', '.join(PROFILES)}")
    parser.add_argument("--no-coverage", action="store_true", help="skip the interval coverage table")
    parser.add_argument(
        "--truth",
        choices=TRUTHS,
        default="model",
        help="with --plan-check: draw the runs from the plan's own model, or from a policy outside it "
        "(additive seed effects, per-task seed effects, broken seeds) [model]",
    )
    parser.add_argument(
        "--family",
        choices=("model", "broken", "both"),
        default="model",
        help="the regressions simulated: the latent-seed model's drops, the broken-seed family (shares "
        f"{', '.join(f'{q:g}' for q in BROKEN_SHARES)} of the seeds broken for every task or for each task on "
        "its own; the drop column is then the share), or both [model]",
    )
    parser.add_argument(
        "--plan-check",
        action="store_true",
        help="instead: the plan against what happens, tasks {1, 3, 10, 38} x rho {0, 0.2, 0.4, 0.6, 0.8} x "
        "profiles, drop mode, one budget (the first of --seeds, else 50)",
    )
    args = parser.parse_args()
    reps = args.reps or (40 if args.smoke else 200 if args.quick else 1000)
    rng = np.random.default_rng(args.seed)
    md, alpha = args.max_drop, args.alpha
    tasks_list, seeds_list, rhos, profiles = (
        ((1, 38), (10,), (0.3,), ("mid",)) if args.smoke else (TASKS, SEEDS, RHOS, PROFILES)
    )
    tasks_list = tuple(int(t) for t in args.tasks) if args.tasks else tasks_list
    seeds_list = tuple(int(s) for s in args.seeds) if args.seeds else seeds_list
    rhos = args.rhos or rhos
    profiles = args.profiles or profiles
    if args.plan_check:
        seeds = int(args.seeds[0]) if args.seeds else 50
        baselines, runs = (3, 10) if args.smoke else (10, 10) if args.quick else (50, 20)
        print(f"drop mode, {seeds} seeds, max drop {md:g}; {baselines} baselines a cell, {runs} runs against each\n")
        print("| truth | tasks | rho | SRs | case | plan: correct | correct | plan: spent | spent | within 0.1 |")
        print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | --- |")
        started = time.perf_counter()
        rows = plan_check(
            rng,
            tuple(int(t) for t in args.tasks) if args.tasks else ((10,) if args.smoke else PLAN_TASKS),
            args.rhos or ((0.3,) if args.smoke else PLAN_RHOS),
            args.profiles or (("high",) if args.smoke else PROFILES),
            seeds, md, alpha, baselines, runs, args.block, args.truth,
        )  # fmt: skip
        optimistic = max(rows, key=lambda r: max(r["plan_correct"] - r["correct"], r["spent"] - r["plan_spent"]))
        pessimistic = max(rows, key=lambda r: r["correct"] - r["plan_correct"])
        print(
            f"\n{sum(r['within'] for r in rows)} of {len(rows)} cells within {PLAN_TOLERANCE:g} of the plan; "
            f"{time.perf_counter() - started:.0f} s"
        )
        for name, row in (("most optimistic", optimistic), ("most pessimistic", pessimistic)):
            print(
                f"{name} worse end: correct {row['plan_correct']:.2f} planned vs {row['correct']:.2f} +- "
                f"{row['correct_se']:.2f}, spent {row['plan_spent']:.2f} planned vs {row['spent']:.2f} "
                f"({row['tasks']} tasks, rho {row['rho']:g}, {row['profile']}, {row['case']})"
            )
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return
    cases = []
    if args.family in ("model", "both"):
        drops = (0.0, 2 * md) if args.smoke else (0.0, md, md + 0.01, 2 * md, 0.3)
        cases += [(drop, "even") for drop in drops] + ([] if args.smoke else [(2 * md, "uneven")])
    if args.family in ("broken", "both"):
        shares = (0.08,) if args.smoke else BROKEN_SHARES
        cases += [(share, kind) for kind in BROKEN for share in shares]
    started = time.perf_counter()
    cells = []
    for tasks, seeds, rho, profile, (drop, kind), mode in itertools.product(
        tasks_list, seeds_list, rhos, profiles, cases, ("drop", "min_sr")
    ):
        if kind == "uneven" and tasks < 3:
            continue
        results, true_drop = cell(rng, tasks, seeds, rho, profile, drop, kind, mode, reps, md, alpha, args.block)
        for method, (wrong, correct, undecided, spent) in results.items():
            cells.append(
                {
                    "tasks": tasks,
                    "seeds": seeds,
                    "rho": rho,
                    "profile": profile + ("-uneven" if kind == "uneven" else ""),
                    "kind": kind,
                    "drop": round(drop, 6),
                    "true_drop": round(true_drop, 6),
                    "mode": mode,
                    "method": method,
                    "wrong": wrong,
                    "correct": correct,
                    "undecided": undecided,
                    "spent": spent,
                    "reps": reps,
                }
            )
    coverage_rows = (
        []
        if args.no_coverage
        else coverage(
            rng,
            reps if not args.smoke else 20,
            (5, 10) if args.smoke else (5, 10, 20, 50),
            (0.3,) if args.smoke else (0.3, 0.8),
            (("U(0,0.9)", 0.9),) if args.smoke else (("U(0,0.9)", 0.9), ("U(0,0.2)", 0.2)),
        )
    )
    report(cells, coverage_rows, reps, md, alpha, args.block, time.perf_counter() - started)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(cells, out, indent=1)


def _family(c: dict) -> str:
    return "broken" if c["kind"] in BROKEN else "model"


def _where(c: dict) -> str:
    what = f"{c['kind']} {c['drop']:g}" if _family(c) == "broken" else f"drop {c['drop']:g}"
    return f"{c['tasks']} tasks x {c['seeds']} seeds, rho {c['rho']}, {c['profile']}, {what}"


def _cell_key(c: dict) -> tuple:
    return tuple(c[k] for k in ("tasks", "seeds", "rho", "profile", "kind", "drop", "mode"))


def report(
    cells: list[dict], coverage_rows: list[dict], reps: int, md: float, alpha: float, block: int, elapsed: float
) -> None:
    print(f"{reps} replications per cell; max drop {md:g}, alpha {alpha:g}, blocks of {block} seeds; {elapsed:.0f} s")
    print(
        f"rates are shares of replications; s.e. = sqrt(r(1-r)/{reps}); wrong: FAIL at drop <= max drop, PASS above\n"
    )
    bound = alpha + 2 * se(alpha, reps)
    print("Worst wrong-verdict rate per family, mode and method (bound: alpha + 2 s.e.):\n")
    print("| family | mode | method | worst wrong | s.e. | cells above the bound | cell |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for family, mode, method in itertools.product(("model", "broken"), ("drop", "min_sr"), METHODS):
        rows = [c for c in cells if _family(c) == family and c["mode"] == mode and c["method"] == method]
        if not rows:
            continue
        worst = max(rows, key=lambda c: c["wrong"])
        above = sum(c["wrong"] > bound for c in rows)
        flag = "" if worst["wrong"] <= bound else " (above)"
        print(
            f"| {family} | {mode} | {method} | {worst['wrong']:.3f}{flag} | {se(worst['wrong'], reps):.3f} | "
            f"{above} of {len(rows)} | {_where(worst)} |"
        )
    broken = [c for c in cells if _family(c) == "broken"]
    if broken:
        print("\nThe broken-seed family: the worst wrong verdict over tasks, seeds and rho, per case and method")
        print("(share: of the seeds broken; true drop: the share times the profile's split SR):\n")
        methods = ("auto", "auto_smooth", "betting", "fixed")
        print("| kind | share | SRs | mode | " + " | ".join(methods) + " |")
        print("| --- | ---: | --- | --- |" + " ---: |" * len(methods))
        for kind, share, profile, mode in itertools.product(
            BROKEN, sorted({c["drop"] for c in broken}), sorted({c["profile"] for c in broken}), ("drop", "min_sr")
        ):
            group = [
                c for c in broken if (c["kind"], c["drop"], c["profile"], c["mode"]) == (kind, share, profile, mode)
            ]
            if not group:
                continue
            worst = []
            for method in methods:
                top = max((c for c in group if c["method"] == method), key=lambda c: c["wrong"])
                flag = " (above)" if top["wrong"] > bound else ""
                worst.append(f"{top['wrong']:.3f}{flag} ({top['tasks']}x{top['seeds']}, rho {top['rho']:g})")
            print(f"| {kind} | {share:g} | {profile} | {mode} | " + " | ".join(worst) + " |")
    largest = max(c["seeds"] for c in cells)
    oracle = {_cell_key(c): c["correct"] for c in cells if c["method"] == ORACLE}
    smooth = {_cell_key(c): c for c in cells if c["method"] == "auto_smooth"}
    print("\nThe cells users meet (drop mode, the automatic gate, no change and twice max drop), the default")
    print("rule beside the rule with --vla-gate-assume=smooth-seeds (the rule before the broken-seed guard);")
    print("oracle, a reference: the z test knowing the per-seed variance, one look at the whole budget:\n")
    print(
        "| tasks | seeds | rho | SRs | true drop | correct | wrong | budget spent | smooth-seeds: correct | "
        "smooth-seeds: spent | oracle: correct |"
    )
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in cells:
        if (
            c["mode"] == "drop"
            and c["method"] == "auto"
            and c["kind"] == "even"
            and c["rho"] in (0.3, 0.6)
            and c["tasks"] in (10, 38)
            and c["seeds"] == largest
            and c["drop"] in (0.0, round(2 * md, 6))
        ):
            before = smooth[_cell_key(c)]
            print(
                f"| {c['tasks']} | {c['seeds']} | {c['rho']:g} | {c['profile']} | {c['true_drop']:.3g} | "
                f"{c['correct']:.2f} +- {se(c['correct'], reps):.2f} | {c['wrong']:.3f} | {c['spent']:.2f} | "
                f"{before['correct']:.2f} +- {se(before['correct'], reps):.2f} | {before['spent']:.2f} | "
                f"{oracle[_cell_key(c)]:.2f} |"
            )
    if not coverage_rows:
        return
    print("\nSplit-SR interval coverage (38 tasks, nominal 0.95):\n")
    print("| seeds | rho | SRs | coverage | s.e. |")
    print("| ---: | ---: | --- | ---: | ---: |")
    for row in coverage_rows:
        print(
            f"| {row['seeds']} | {row['rho']:g} | {row['profile']} | {row['coverage']:.3f} | "
            f"{se(row['coverage'], row['reps']):.3f} |"
        )


if __name__ == "__main__":
    main()
