"""Anytime-valid confidence sequences for the sequential gate.

Method: the betting confidence sequence of Waudby-Smith and Ramdas, "Estimating means of
bounded random variables by betting", JRSS-B 86(1), 2024 (arXiv 2010.09686), with their aGRAPA
bets (section 5.3, c = 0.9). For each candidate mean m a gambler bets on x_i against m with a
stake chosen from the observations before i only, lambda_i(m) = (mu_{i-1} - m) /
(sigma2_{i-1} + (mu_{i-1} - m)^2) kept within [-c/(1-m), c/m] so the capital stays positive.
When the mean is m the capital prod_i (1 + lambda_i(m) (x_i - m)) is a nonnegative martingale,
so by Ville's inequality it ever reaches 1/alpha with probability at most alpha. The set of m
where it has not is a confidence sequence: it covers the mean at every look simultaneously,
so stopping at the first look where the verdict is settled keeps the error rate at alpha,
however many looks are taken.

Why this one: the observations are bounded (per-seed means in [0, 1], per-seed paired
differences in [-1, 1]) and independent across seeds, which is all it assumes; the aGRAPA bet
approximates the growth-optimal one, so it rejects a wrong mean about as fast as a bounded
variable allows (a gate wants to stop early) and adapts to the variance, where a
Hoeffding-type bound (Howard et al., Ann. Stat. 2021) pays for the whole range; and it needs no
plan of the looks, unlike alpha spending. ``scripts/gate_simulation.py`` checks its error rate
and its saving.

Everything is vectorised over leading axes so the simulation runs many paths at once.
"""

from __future__ import annotations

import math

import numpy as np

from pytest_vlaeval.gate.verdict import FAIL, PASS, UNDECIDED

GRID = np.linspace(0.0, 1.0, 401)
"""Candidate means; bounds are widened by one step so the grid never makes them narrower."""

BET_CAP = 0.9
"""c in the paper (which uses 1/2 or 3/4; any c < 1 keeps validity): 0.9 stops sooner in `scripts/gate_simulation.py`."""


def betting_bounds(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the (1 - alpha) confidence sequence after each observation.

    ``x``: observations in [0, 1], shape (..., n), in the order they arrived. Returns two arrays
    of that shape: the bounds on the mean given x[..., :t+1].
    """
    x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    n = x.shape[-1]
    t = np.arange(1, n + 1)
    running_mean = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    squares = (0.25 + np.cumsum((x - running_mean) ** 2, axis=-1)) / (t + 1)
    start = np.ones((*x.shape[:-1], 1))
    mean_before = np.concatenate([0.5 * start, running_mean[..., :-1]], axis=-1)[..., None, :]
    variance_before = np.concatenate([0.25 * start, squares[..., :-1]], axis=-1)[..., None, :]
    m = GRID[:, None]
    gap = mean_before - m
    bet = np.clip(gap / (variance_before + gap**2), -BET_CAP / np.maximum(1 - m, 1e-12), BET_CAP / np.maximum(m, 1e-12))
    log_capital = np.cumsum(np.log1p(bet * (x[..., None, :] - m)), axis=-1)
    inside = log_capital < math.log(1 / alpha)  # (..., grid, n)
    step = GRID[1] - GRID[0]
    any_inside = inside.any(axis=-2)
    first = np.argmax(inside, axis=-2)
    last = len(GRID) - 1 - np.argmax(inside[..., ::-1, :], axis=-2)
    mean = np.cumsum(x, axis=-1) / t
    lower = np.where(any_inside, np.clip(GRID[first] - step, 0.0, 1.0), mean)
    upper = np.where(any_inside, np.clip(GRID[last] + step, 0.0, 1.0), mean)
    return lower, upper


def drop_verdict(lower: np.ndarray | float, upper: np.ndarray | float, max_drop: float) -> np.ndarray:
    """FAIL once the drop is surely above ``max_drop``, PASS once surely at or below it."""
    return np.where(np.asarray(lower) > max_drop, FAIL, np.where(np.asarray(upper) <= max_drop, PASS, UNDECIDED))


def min_sr_verdict(lower: np.ndarray | float, upper: np.ndarray | float, min_sr: float) -> np.ndarray:
    """PASS once the SR is surely at or above ``min_sr``, FAIL once surely below it."""
    return np.where(np.asarray(lower) >= min_sr, PASS, np.where(np.asarray(upper) < min_sr, FAIL, UNDECIDED))


def drop_bounds(differences: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Running estimate and confidence-sequence bounds of the drop -mean(d) from per-seed
    paired differences d in [-1, 1] (rescaled to [0, 1] for the betting: x = (1 - d) / 2)."""
    differences = np.asarray(differences, dtype=float)
    lower, upper = betting_bounds((1 - differences) / 2, alpha)
    estimate = 0.0 - np.cumsum(differences, axis=-1) / np.arange(1, differences.shape[-1] + 1)  # no -0.000
    return estimate, 2 * lower - 1, 2 * upper - 1


def mean_bounds(values: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Running estimate and confidence-sequence bounds of the mean of per-seed means in [0, 1]."""
    values = np.asarray(values, dtype=float)
    lower, upper = betting_bounds(values, alpha)
    return np.cumsum(values, axis=-1) / np.arange(1, values.shape[-1] + 1), lower, upper
