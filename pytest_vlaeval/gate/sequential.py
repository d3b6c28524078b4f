"""Confidence bounds for the gate, one function per method, and the rule that picks the method.

**Betting confidence sequence** (assumption-free). Waudby-Smith and Ramdas, "Estimating means
of bounded random variables by betting", JRSS-B 86(1), 2024 (arXiv 2010.09686), with their
aGRAPA bets (section 5.3, c = 0.9). For each candidate mean m a gambler bets on x_i against m
with a stake chosen from the observations before i only, lambda_i(m) = (mu_{i-1} - m) /
(sigma2_{i-1} + (mu_{i-1} - m)^2) kept within [-c/(1-m), c/m] so the capital stays positive.
When the mean is m the capital prod_i (1 + lambda_i(m) (x_i - m)) is a nonnegative martingale,
so by Ville's inequality it ever reaches 1/alpha with probability at most alpha. The set of m
where it has not is a confidence sequence: it covers the mean at every look simultaneously,
whatever the distribution on the bounded range. Its price: a test valid for every distribution
on [-1, 1] stakes little per seed, so it cannot decide with 3 seeds or fewer and an unchanged
policy PASSes at max drop 0.05 only after about 74 seeds.

**Group-sequential t test** (variance-adaptive). Pocock, "Group sequential methods in the design
and analysis of clinical trials", Biometrika 64(2), 1977; Jennison and Turnbull, "Group
Sequential Methods with Applications to Clinical Trials", 2000, ch. 2-3. The looks are planned
(one per block of seeds, from ``MIN_SEEDS`` seeds on, up to the budget); each side of the
threshold is tested one-sided at every look with the same nominal level, chosen so that a
standardised random walk crosses that constant boundary at any of the K looks with probability
alpha (``pocock_level``, computed by the recursive numerical integration of Armitage, McPherson
and Rowe, JRSS-A 132(2), 1969). The statistic is the mean of the per-seed values with its
standard error from the observed spread, the boundary the t quantile at that nominal level with
n - 1 degrees of freedom. Chosen over the asymptotic confidence sequence (Waudby-Smith et al.,
"Time-uniform central limit theory", 2021/2024) because looks in a CI gate are few and known
in advance, and the planned boundary is narrower: in the simulation (``docs/gate.md``) it
decides more often at a smaller share of the budget.

**The rules.** Both need at least ``MIN_TASKS`` compared tasks and a budget of ``MIN_SEEDS``
seeds for the t test, else the betting sequence decides. Against a baseline (``drop_method``) the
t test then takes any SRs, its variance never below the variance the per-seed drop has at the
boundary (every task dropping by max drop) in the latent-seed model at the baseline's SRs and seed
correlation (``seed_model``): near 0 or 1 a drop falls on a few hard seeds, which the observed
variance misses early, and that floor supplies it. With a min SR (``method_for``, ``choose``) no
baseline tells the seeds' structure, so the t test needs, besides, task SRs whose mean p (1 - p) is
at least ``MIN_SPREAD`` (that of SR 0.15 or 0.85), and its floor is the variance of independent
tasks (``variance_floor``). A min SR says nothing of the tasks' own SRs (half the tasks near 0
and half near 1 average 1/2 too), so in that mode the rule is applied again at every look to
the task SRs observed so far (``OBSERVED``): with the min SR standing in for them, the t test
wrongly PASSed 0.069 of the time in the simulation's cell of 38 tasks, half near 0 and half near
1, rho 0.8. ``scripts/gate_simulation.py`` checks the wrong-verdict rate of each method and of
the rules in every cell, the hard ones included.

Everything is vectorised over leading axes so the simulation runs many paths at once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from pytest_vlaeval.gate.seed_model import boundary_variance, seed_correlation
from pytest_vlaeval.gate.stats import t_quantile

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
    # An empty sequence (every grid mean rejected: chance <= alpha) says nothing: the whole range,
    # so no verdict rests on it.
    lower = np.where(any_inside, np.clip(GRID[first] - step, 0.0, 1.0), 0.0)
    upper = np.where(any_inside, np.clip(GRID[last] + step, 0.0, 1.0), 1.0)
    return lower, upper


BETTING, T_TEST = "betting confidence sequence", "group-sequential t test"

MIN_TASKS = 10
"""Fewest compared tasks for the t test: with fewer, per-seed values take a handful of levels."""
MIN_SEEDS = 10
"""Fewest seeds at which the t test looks (its first look, and the fixed test's minimum)."""
MIN_SPREAD = 0.15 * 0.85
"""The least mean of p (1 - p) over the reference task SRs the t test needs (that of SRs 0.15 or
0.85): tasks near 0 or 1 give per-seed values that sit still for long runs and then jump, which
the observed variance does not see early (``scripts/gate_simulation.py``: 38 tasks, half near 0
and half near 1, rho 0.8, wrongly decided 0.10 of the time when the rule looked only at the mean SR)."""


@dataclass(frozen=True)
class Method:
    """How the gate bounds the mean: the method, why it was chosen, and the t test's floor."""

    name: str
    reason: str
    floor: float = 0.0
    """The smallest variance the t test believes (``variance_floor``)."""


REFERENCE, OBSERVED = "reference SRs", "observed task SRs"
"""What the rule's SRs are: the baseline's (or the min SR), or the current run's so far (min-SR looks)."""


def choose(tasks: int, seeds: int, spread: float, floor: float, srs_are: str = REFERENCE) -> Method:
    """The method for ``tasks`` compared tasks, a budget of ``seeds`` and the mean p (1 - p) of
    the SRs the rule looks at, ``srs_are`` (see the module docstring)."""
    if tasks < MIN_TASKS:
        return Method(BETTING, f"{tasks} tasks < {MIN_TASKS}")
    if seeds < MIN_SEEDS:
        return Method(BETTING, f"{seeds} seeds < {MIN_SEEDS}")
    if spread < MIN_SPREAD:
        return Method(BETTING, f"{srs_are} near 0 or 1: mean p(1-p) {spread:.3f} < {MIN_SPREAD:.3f}")
    return Method(T_TEST, f"{tasks} tasks, {seeds} seeds, {srs_are}' mean p(1-p) {spread:.3f}", floor)


def method_for(srs: Sequence[float], seeds: int, srs_are: str = REFERENCE) -> Method:
    """The method for tasks at these SRs and a budget of ``seeds``."""
    srs = list(srs)
    spread = sum(p * (1 - p) for p in srs) / len(srs)
    return choose(len(srs), seeds, spread, variance_floor(srs, seeds), srs_are)


def drop_method(srs: Sequence[float], seed_means: Sequence[float], seeds: int, max_drop: float) -> Method:
    """The method for a drop against a baseline with task SRs ``srs`` and per-seed means
    ``seed_means`` (its seeds complete on every task), a budget of ``seeds`` and ``max_drop``.

    The t test's floor here is the variance the per-seed drop has at the boundary, a drop of
    ``max_drop`` on every task, in the latent-seed model (``seed_model``) at the baseline's SRs and
    at the upper end of the seed correlation its per-seed means show. That floor is what the
    observed variance misses early when the SRs sit near 0 or 1 (the drop then falls on a few
    seeds), so unlike ``method_for`` no SR spread is required."""
    srs = list(srs)
    if len(srs) < MIN_TASKS:
        return Method(BETTING, f"{len(srs)} tasks < {MIN_TASKS}")
    if seeds < MIN_SEEDS:
        return Method(BETTING, f"{seeds} seeds < {MIN_SEEDS}")
    rho = float(seed_correlation(np.asarray(seed_means), np.asarray(srs)))
    floor = max(variance_floor(srs, seeds), boundary_variance(srs, seeds, max_drop, rho))
    reason = (
        f"{len(srs)} tasks, {seeds} seeds, variance floor at a drop of {max_drop:g} from the baseline's task SRs "
        f"and seed correlation {rho:.2f}"
    )
    return Method(T_TEST, reason, floor)


def variance_floor(reference_srs: Sequence[float], episodes: int) -> float:
    """The least variance the t test believes of a per-seed value: that of the mean over tasks
    of independent outcomes at each task's reference SR, smoothed towards 1/2 by one success and
    one failure in ``episodes`` (so an SR of 0 or 1 still has spread). For paired differences it
    is half the variance of two independent runs, which leaves room for the runs correlating
    through the seed."""
    smoothed = [(p * episodes + 1) / (episodes + 2) for p in reference_srs]
    return sum(p * (1 - p) for p in smoothed) / len(smoothed) ** 2


@functools.cache
def pocock_level(looks: int, alpha: float) -> float:
    """The one-sided nominal level per look that spends ``alpha`` over ``looks`` equally spaced
    looks: 1 - Phi(c), where a standard random walk W_k crosses c sqrt(k) at some k <= looks
    with probability alpha (bisection on c, the crossing probability by recursive integration)."""
    if looks <= 1:
        return alpha
    step = 0.04
    kernel_x = np.arange(-8.0, 8.0 + step, step)
    kernel = np.exp(-(kernel_x**2) / 2) / math.sqrt(2 * math.pi) * step
    bottom = -8.0 * math.sqrt(looks)
    centre = (len(kernel) - 1) // 2

    def crossing(c: float) -> float:
        grid = np.arange(bottom, c * math.sqrt(looks) + step, step)
        mass = np.exp(-(grid**2) / 2) / math.sqrt(2 * math.pi) * step
        mass[grid > c] = 0.0
        for k in range(2, looks + 1):
            mass = np.convolve(mass, kernel)[centre : centre + len(grid)]
            mass[grid > c * math.sqrt(k)] = 0.0
        return 1.0 - float(mass.sum())

    normal = NormalDist()
    low, high = normal.inv_cdf(1 - alpha), normal.inv_cdf(1 - alpha / looks)
    for _ in range(25):
        middle = (low + high) / 2
        low, high = (middle, high) if crossing(middle) > alpha else (low, middle)
    return 1 - normal.cdf(high)


def t_bounds(
    values: np.ndarray, level: float, floor: float, value_range: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Running one-sided bounds, each at ``level``, of the mean of ``values`` (shape (..., n)):
    mean -/+ t_{n-1}(1 - level) * sd / sqrt(n), the variance at least ``floor``; the whole
    range before two values."""
    values = np.asarray(values, dtype=float)
    n = np.arange(1, values.shape[-1] + 1)
    mean = np.cumsum(values, axis=-1) / n
    squares = np.cumsum(values**2, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = np.where(n > 1, (squares - n * mean**2) / np.maximum(n - 1, 1), np.inf)
    quantiles = np.array([t_quantile(1 - level, k - 1) if k > 1 else np.inf for k in n])
    half = quantiles * np.sqrt(np.maximum(variance, floor) / n)
    low, high = value_range
    return np.clip(mean - half, low, high), np.clip(mean + half, low, high)


def running_bounds(
    values: np.ndarray, method: Method, alpha: float, looks: int, value_range: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the mean of ``values`` (shape (..., n), in ``value_range``) after
    each value, by ``method``; each bound is wrong at any of the planned ``looks`` with
    probability at most ``alpha``. The t test says nothing before ``MIN_SEEDS`` values."""
    low, high = value_range
    values = np.asarray(values, dtype=float)
    if method.name == BETTING:
        lower, upper = betting_bounds((values - low) / (high - low), alpha)
        return low + (high - low) * lower, low + (high - low) * upper
    lower, upper = t_bounds(values, pocock_level(looks, alpha), method.floor, value_range)
    early = np.arange(values.shape[-1]) < MIN_SEEDS - 1
    return np.where(early, low, lower), np.where(early, high, upper)
