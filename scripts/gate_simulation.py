"""How often each regression gate gives a wrong verdict, and what the sequential gate spends.

Simulated runs have known per-task success rates and a latent per-seed difficulty shared by all
tasks and by both runs (the same seed gives the same initial state), so tasks correlate as in
the benchmark: episode (t, s) succeeds when sqrt(rho) * z_s + sqrt(1 - rho) * e < Phi^-1(p_t),
z_s and e independent standard normals, hence P(success) = p_t exactly and a latent
correlation rho between tasks at a seed. The current policy's task SRs are the baseline's minus
the true drop, so the split SR drops by exactly that much.

Verdicts are wrong when they say FAIL while the drop is at most --max-drop, or PASS while it
is above; UNDECIDED is never wrong. Methods:
- today: the previous fixed gate, an exact McNemar test pooling every (task, seed) pair;
- seed: the fixed gate with the seed as the unit (exact sign-flip test on per-seed sums);
- sequential: ``--vla-sequential``, a look after every block of seeds.
Both fixed gates FAIL when the split SR drop exceeds --max-drop and their test of "no change"
is significant at alpha.

    python scripts/gate_simulation.py [--quick] [--reps N] [--max-drop 0.05] [--alpha 0.05]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import time
from statistics import NormalDist

import numpy as np

from pytest_vlaeval.gate.fixed import FAIL, PASS, UNDECIDED
from pytest_vlaeval.gate.sequential import drop_bounds, drop_verdict
from pytest_vlaeval.gate.sequential_gate import DEFAULT_BLOCK
from pytest_vlaeval.gate.stats import mcnemar_exact, sign_flip_exact

TASKS = (3, 10, 38)
EPISODES = (10, 50)
CORRELATIONS = (0.0, 0.3, 0.6)
CHUNK = 200
"""Replications per confidence-sequence batch (each holds a grid x seeds array per replication)."""


def simulate(rng: np.random.Generator, rates: np.ndarray, drop: float, rho: float, seeds: int, reps: int):
    """Baseline and current outcomes, shape (reps, tasks, seeds), sharing each seed's latent."""
    latent = rng.standard_normal((reps, 1, seeds))
    thresholds = np.array([NormalDist().inv_cdf(p) for p in rates])[None, :, None]
    thresholds_now = np.array([NormalDist().inv_cdf(p - drop) for p in rates])[None, :, None]
    shape = (reps, len(rates), seeds)
    base = math.sqrt(rho) * latent + math.sqrt(1 - rho) * rng.standard_normal(shape) < thresholds
    now = math.sqrt(rho) * latent + math.sqrt(1 - rho) * rng.standard_normal(shape) < thresholds_now
    return base, now


@functools.cache
def pooled_mcnemar(baseline_only: int, current_only: int) -> float:
    return mcnemar_exact(baseline_only, current_only)


def fixed_verdicts(base: np.ndarray, now: np.ndarray, max_drop: float, alpha: float) -> tuple[list[str], list[str]]:
    drops = base.mean(axis=(1, 2)) - now.mean(axis=(1, 2))  # balanced: mean of task SRs
    today, seed = [], []
    for rep, drop in enumerate(drops):
        if drop <= max_drop:
            today.append(PASS)
            seed.append(PASS)
            continue
        lost = int((base[rep] & ~now[rep]).sum())
        gained = int((now[rep] & ~base[rep]).sum())
        today.append(FAIL if pooled_mcnemar(lost, gained) < alpha else PASS)
        sums = (now[rep].astype(int) - base[rep].astype(int)).sum(axis=0)
        seed.append(FAIL if sign_flip_exact(sums.tolist()) < alpha else PASS)
    return today, seed


def sequential_verdicts(base: np.ndarray, now: np.ndarray, max_drop: float, alpha: float, block: int):
    """Verdict and episodes spent per replication, looking after every complete block."""
    tasks, seeds = base.shape[1], base.shape[2]
    differences = (now.astype(float) - base.astype(float)).mean(axis=1)  # (reps, seeds)
    chunks = [drop_bounds(part, alpha) for part in np.array_split(differences, max(1, len(differences) // CHUNK))]
    lower = np.concatenate([chunk[1] for chunk in chunks])
    upper = np.concatenate([chunk[2] for chunk in chunks])
    looks = sorted({min(end, seeds) for end in range(block, seeds + block, block)})
    verdicts = np.full(len(base), UNDECIDED, dtype=object)
    spent = np.full(len(base), seeds * tasks)
    open_ = np.ones(len(base), dtype=bool)
    for end in looks:
        now_verdict = drop_verdict(lower[:, end - 1], upper[:, end - 1], max_drop)
        settled = open_ & (now_verdict != UNDECIDED)
        verdicts[settled] = now_verdict[settled]
        spent[settled] = end * tasks
        open_ &= ~settled
    return verdicts, spent / (seeds * tasks)


def wrong(verdicts, regressed: bool) -> float:
    verdicts = np.asarray(verdicts)
    return float(np.mean(verdicts == (PASS if regressed else FAIL)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 replications per cell (under 2 minutes)")
    parser.add_argument("--reps", type=int, help="replications per cell [1000; 200 with --quick]")
    parser.add_argument("--max-drop", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK, help="seeds per block of the sequential gate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    reps = args.reps or (200 if args.quick else 1000)
    rng = np.random.default_rng(args.seed)
    md = args.max_drop
    drops = (0.0, md / 2, md, 2 * md, 0.3)
    started = time.perf_counter()
    print(f"{reps} replications per cell; max drop {md:g}, alpha {args.alpha:g}, blocks of {args.block} seeds")
    print("wrong = share of wrong verdicts (FAIL at drop <= max drop, PASS above it); UNDECIDED is not wrong")
    print()
    print(
        "| tasks | episodes | true drop | rho | wrong: today | wrong: seed-level | wrong: sequential | undecided | episodes spent |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    worst = (0.0, "")
    spent_all, spent_big_drop = [], []
    for tasks, seeds, drop, rho in itertools.product(TASKS, EPISODES, drops, CORRELATIONS):
        rates = rng.uniform(0.35, 0.95, tasks)  # minus the largest drop stays a probability
        base, now = simulate(rng, rates, drop, rho, seeds, reps)
        regressed = drop > md + 1e-12
        today, seed = fixed_verdicts(base, now, md, args.alpha)
        sequential, spent = sequential_verdicts(base, now, md, args.alpha, args.block)
        rates_wrong = wrong(today, regressed), wrong(seed, regressed), wrong(sequential, regressed)
        undecided = float(np.mean(sequential == UNDECIDED))
        spent_all.append(spent.mean())
        if drop == 0.3 and seeds == max(EPISODES):
            spent_big_drop.append(spent.mean())
        if rates_wrong[2] > worst[0]:
            worst = (rates_wrong[2], f"{tasks} tasks, {seeds} episodes, drop {drop:g}, rho {rho:g}")
        print(
            f"| {tasks} | {seeds} | {drop:.3f} | {rho:.1f} | {rates_wrong[0]:.3f} | {rates_wrong[1]:.3f} | "
            f"{rates_wrong[2]:.3f} | {undecided:.2f} | {spent.mean():.2f} |"
        )
    error = 2 * math.sqrt(args.alpha * (1 - args.alpha) / reps)
    print()
    print(
        f"{time.perf_counter() - started:.0f} s. At drop 0.3 with {max(EPISODES)} episodes the sequential gate spends "
        f"{max(spent_big_drop):.2f} of the fixed budget at most (mean {np.mean(spent_big_drop):.2f})."
    )
    print(
        f"worst sequential wrong-verdict rate {worst[0]:.3f} ({worst[1]}) vs alpha {args.alpha:g} "
        f"+ 2 s.e. {error:.3f}; mean episodes spent by the sequential gate: {np.mean(spent_all):.2f} of the fixed "
        f"budget (saving {1 - np.mean(spent_all):.0%})"
    )


if __name__ == "__main__":
    main()
