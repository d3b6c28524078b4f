"""Interval estimates and the paired test the gate uses, with the seed as the independent unit.

A benchmark that gives every task the same seeds makes episodes of different tasks correlated
(same initial states), so only seeds are independent draws. No SciPy needed.

- Task SR: Wilson score interval (95 %) for a binomial proportion (a task's seeds are independent).
- Group SR (a split, a memory type): the mean of its tasks' SRs. Its variance is estimated with
  seeds as clusters: writing the estimate as a sum over seeds of c_s = sum_t Y(t,s) / (T n_t),
  the c_s are independent whatever the correlation between tasks, and the cluster-robust
  (linearised) variance is S/(S-1) * sum_s r_s^2 with r_s = sum_t (Y(t,s) - p_t) / (T n_t).
  With every task on the same S seeds this is exactly the variance of the per-seed means
  m_s = mean_t Y(t,s) divided by S; when episodes errored (a task with fewer seeds), each task
  still weighs 1/T and each of its seeds 1/n_t: that is the rule for unbalanced data. The
  interval is Wilson's at the effective number of independent episodes p(1-p)/variance (Kish's
  design effect), kept between S (tasks perfectly correlated) and the number of episodes
  (tasks independent), with the t quantile on S - 1 degrees of freedom in place of the normal z:
  the variance is estimated from S clusters, and with the normal z the interval covered only
  0.79-0.94 at 10 seeds or fewer when tasks correlate (0.94-0.97 with t, ``docs/gate.md``).
  Very low SRs with strongly correlated tasks stay below nominal (skew; measured in the docs).
  A group of one task gets that task's Wilson interval.
- Paired comparison with a baseline: on the seeds where every compared task has an episode in
  both runs (a seed with an errored or absent episode leaves the comparison, so every d_s
  averages the same tasks), d_s = mean_t (Y_new(t,s) - Y_base(t,s)) in [-1, 1], independent
  across seeds whatever the tasks' correlation: the gate (``fixed``, ``sequential_gate``) tests
  their mean. Each task also gets its exact McNemar p-value, for the report.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

Z95 = 1.959963984540054

Outcomes = Mapping[int, bool]
"""One task's completed episodes: seed -> success."""


def task_outcomes(result: Mapping[str, Any]) -> dict[int, bool]:
    """A canonical per-task record's completed episodes: seed -> success."""
    return dict(zip(result["episode_seeds"], result["successes"], strict=True))


def success_rate(successes: int, completed: int) -> float:
    """A task's SR: successes over its completed episodes (an episode that errored never counts)."""
    return successes / completed


def group_sr(task_srs: Iterable[float]) -> float:
    """The SR of a group of tasks (a split, a memory type, a gate's tasks): the mean of its tasks'
    SRs, never pooled over episodes, so a task weighs the same whatever its episode count."""
    values = list(task_srs)
    return sum(values) / len(values)


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer ``df``: the closed forms of Abramowitz and Stegun
    26.7.3 (odd df) and 26.7.4 (even df), exact up to rounding."""
    theta = math.atan(t / math.sqrt(df))
    cos2, term, total = math.cos(theta) ** 2, 1.0, 0.0
    if df % 2:
        if df > 1:
            total = term = math.cos(theta)
            for k in range(3, df - 1, 2):
                term *= cos2 * (k - 1) / k
                total += term
        central = 2 / math.pi * (theta + math.sin(theta) * total)
    else:
        total = 1.0
        for k in range(2, df - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        central = math.sin(theta) * total
    return 0.5 + 0.5 * central


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the exact CDF)."""
    low, high = -1e3, 1e3
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def seed_clustered_interval(tasks: Sequence[Outcomes]) -> tuple[float, float]:
    """Interval for the mean of task SRs, seeds as clusters (see the module docstring)."""
    tasks = [t for t in tasks if t]
    if not tasks:
        return 0.0, 1.0
    if len(tasks) == 1:
        return wilson(sum(tasks[0].values()), len(tasks[0]))
    rates = [sum(t.values()) / len(t) for t in tasks]
    estimate = sum(rates) / len(tasks)
    residuals: dict[int, float] = {}
    for rate, outcomes in zip(rates, tasks, strict=True):
        for seed, success in outcomes.items():
            residuals[seed] = residuals.get(seed, 0.0) + (success - rate) / (len(tasks) * len(outcomes))
    seeds = len(residuals)
    episodes = sum(len(t) for t in tasks)
    variance = seeds / (seeds - 1) * sum(r * r for r in residuals.values()) if seeds > 1 else math.inf
    spread = estimate * (1 - estimate)
    effective = episodes if variance == 0 and spread > 0 else spread / variance if variance > 0 else seeds
    effective = min(max(effective, seeds), episodes)
    if seeds < 2:
        return 0.0, 1.0  # one seed of several tasks: no spread between independent units to go by
    return wilson(estimate * effective, effective, t_quantile(0.975, seeds - 1))


def paired_seed_sums(current: Mapping[str, Outcomes], baseline: Mapping[str, Outcomes]) -> dict[int, int]:
    """Per seed, sum over the compared tasks of Y_new - Y_base, on the seeds every task has in both runs.

    The compared tasks are those both runs have; d_s is the sum divided by their number.
    """
    tasks = sorted(set(current) & set(baseline))
    if not tasks:
        return {}
    seeds = set.intersection(*(set(current[t]) & set(baseline[t]) for t in tasks))
    return {s: sum(int(current[t][s]) - int(baseline[t][s]) for t in tasks) for s in sorted(seeds)}


def mcnemar_exact(baseline_only: int, current_only: int) -> float:
    """Two-sided exact McNemar p-value from one task's discordant seeds.

    ``baseline_only``: seeds the baseline solved and the current run did not; ``current_only``
    the reverse. Under no change each discordant seed is a fair coin.
    """
    n = baseline_only + current_only
    if n == 0:
        return 1.0
    k = min(baseline_only, current_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


TaskValues = tuple[Hashable | None, Mapping[int, float]]
"""One task's completed episodes for an interval: the task's cluster (its group along the benchmark's
``interval_clusters`` axis; None where the seeds are the clusters) and seed -> value (a success, or
a paired difference in [-1, 1])."""


def clustered_variance(tasks: Sequence[TaskValues]) -> tuple[float, float, int]:
    """The mean of the tasks' means, its cluster-robust (linearised) variance and the number of
    clusters. With a cluster per task (LIBERO-Plus: a base task and its variants, which share its
    scene and init states) each cluster holds whole tasks: r_k = sum over its tasks of
    (m_t - estimate) / T. Without, the seeds are the clusters, as in the module docstring:
    r_s = sum_t (Y(t,s) - m_t) / (T n_t). The variance is K/(K-1) * sum_k r_k^2 (infinite for one)."""
    tasks = [(key, values) for key, values in tasks if values]
    means = [sum(values.values()) / len(values) for _, values in tasks]
    estimate = sum(means) / len(tasks)
    residuals: dict[Hashable, float] = {}
    for (key, values), mean in zip(tasks, means, strict=True):
        if key is not None:
            residuals[key] = residuals.get(key, 0.0) + (mean - estimate) / len(tasks)
            continue
        for seed, value in values.items():
            residuals[seed] = residuals.get(seed, 0.0) + (value - mean) / (len(tasks) * len(values))
    clusters = len(residuals)
    variance = clusters / (clusters - 1) * sum(r * r for r in residuals.values()) if clusters > 1 else math.inf
    return estimate, variance, clusters


def clustered_sr_interval(tasks: Sequence[TaskValues]) -> tuple[float, float]:
    """The 95% interval of a mean of task SRs with the given clusters: Wilson's at the effective
    number of independent episodes, as ``seed_clustered_interval`` (which this is where the seeds
    are the clusters), kept between the number of clusters and of episodes, with the t quantile on
    clusters - 1 degrees of freedom; a group of one task gets its Wilson interval."""
    tasks = [(key, values) for key, values in tasks if values]
    if not tasks:
        return 0.0, 1.0
    if len(tasks) == 1:
        values = tasks[0][1]
        return wilson(sum(values.values()), len(values))
    estimate, variance, clusters = clustered_variance(tasks)
    if clusters < 2:
        return 0.0, 1.0
    episodes = sum(len(values) for _, values in tasks)
    spread = estimate * (1 - estimate)
    effective = episodes if variance == 0 and spread > 0 else spread / variance if variance > 0 else clusters
    effective = min(max(effective, clusters), episodes)
    return wilson(estimate * effective, effective, t_quantile(0.975, clusters - 1))


def clustered_difference_interval(tasks: Sequence[TaskValues]) -> tuple[float, float]:
    """The 95% interval of a mean of per-task paired differences (each in [-1, 1]) with the given
    clusters: estimate +- t(0.975, clusters - 1) * sqrt(variance), within [-1, 1]; [-1, 1] where
    fewer than two clusters leave no spread to go by."""
    tasks = [(key, values) for key, values in tasks if values]
    if not tasks:
        return -1.0, 1.0
    estimate, variance, clusters = clustered_variance(tasks)
    if clusters < 2:
        return -1.0, 1.0
    half = t_quantile(0.975, clusters - 1) * math.sqrt(variance)
    return max(-1.0, estimate - half), min(1.0, estimate + half)
