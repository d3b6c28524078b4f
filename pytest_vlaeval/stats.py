"""Interval estimates and the paired test the gate uses. Pure Python: no SciPy needed.

- Task SR: Wilson score interval (95 %) for a binomial proportion.
- Split SR: the split SR is a mean of task proportions, not a pooled proportion, so its interval
  is a normal interval on that mean, with each task's variance taken at its Agresti-Coull
  adjusted proportion (successes + z²/2) / (n + z²), which keeps the variance of a task at 0 % or
  100 % from collapsing to zero: SE = sqrt(sum_i p~_i (1 - p~_i) / (n_i + z²)) / T. A group
  of one task gets that task's Wilson interval.
- Regression test: exact two-sided McNemar test on the seeds both runs evaluated (a binomial test
  on the discordant pairs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def mean_of_proportions_interval(counts: Sequence[tuple[int, int]], z: float = Z95) -> tuple[float, float]:
    """Interval for the mean of task proportions, ``counts`` = [(successes, n), ...]."""
    counts = [(s, n) for s, n in counts if n > 0]
    if not counts:
        return 0.0, 1.0
    if len(counts) == 1:  # one task: its own Wilson interval, so a group never claims more
        return wilson(*counts[0], z=z)
    mean = sum(s / n for s, n in counts) / len(counts)
    variance = 0.0
    for s, n in counts:
        adjusted = (s + z * z / 2) / (n + z * z)
        variance += adjusted * (1 - adjusted) / (n + z * z)
    half = z * math.sqrt(variance) / len(counts)
    return max(0.0, mean - half), min(1.0, mean + half)


def mcnemar_exact(baseline_only: int, current_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    ``baseline_only``: seeds the baseline solved and the current run did not; ``current_only``
    the reverse. Under no change each discordant seed is a fair coin.
    """
    n = baseline_only + current_only
    if n == 0:
        return 1.0
    k = min(baseline_only, current_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)
