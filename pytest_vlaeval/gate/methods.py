"""The gate's methods, one class each (``Method``: bounds on the mean of per-seed values, and
what a PASS by it assumes), and the rule that picks one.

Adding a method is one class here (its bounds and its assumption), its cells in
``scripts/gate_simulation.py`` and its section in ``docs/gate.md``; the gates, the plan and the
reports call ``Method.bounds`` and ``pass_rests_on`` and never ask which method they hold.

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

**The broken-seed guard** (``GuardedTTest``, the default). The t test's floor comes from a model in
which seeds move the tasks smoothly. A regression concentrated on whole seeds (a policy that fails
every task on 8% of the initial states and is unchanged elsewhere) is outside it: until the first
broken seed comes up the per-seed drops show nothing, and the t test PASSed such a policy in 12%
of runs at max drop 0.05. No method valid for every distribution can PASS in fewer than about
59 seeds there, so the guard holds PASS back exactly that long: until a share of broken seeds
large enough to pass the threshold would have shown one with probability 1 - alpha
(``broken_seed_bounds``). ``--vla-gate-assume=smooth-seeds`` drops the guard (``TTest``),
``--vla-gate-assume=nothing`` takes the betting sequence everywhere; the verdict says which
assumption a PASS rests on (``pass_rests_on``).

Everything is vectorised over leading axes so the simulation runs many paths at once.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar

import numpy as np

from pytest_vlaeval.choices import NOTHING, RANDOM_BREAKS, SMOOTH_SEEDS
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


MIN_TASKS = 10
"""Fewest compared tasks for the t test: with fewer, per-seed values take a handful of levels."""
MIN_SEEDS = 10
"""Fewest seeds at which the t test looks (its first look, and the fixed test's minimum)."""
MIN_SPREAD = 0.15 * 0.85
"""The least mean of p (1 - p) over the reference task SRs the t test needs (that of SRs 0.15 or
0.85): tasks near 0 or 1 give per-seed values that sit still for long runs and then jump, which
the observed variance does not see early (``scripts/gate_simulation.py``: 38 tasks, half near 0
and half near 1, rho 0.8, wrongly decided 0.10 of the time when the rule looked only at the mean SR)."""


class Method(ABC):
    """How a gate bounds the mean of its per-seed values: one class per method, chosen by the rule
    (``drop_method``, ``method_for``) and used alike by both gates, the plan and the simulation."""

    name: ClassVar[str]
    interval: ClassVar[str]
    """What its bounds are called on the verdict line."""
    batch: ClassVar[int | None] = None
    """Replications the simulation bounds at a time (None: all at once)."""
    reason: str

    @abstractmethod
    def bounds(
        self, values: np.ndarray, alpha: float, looks: int, value_range: tuple[float, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of the mean of ``values`` (shape (..., n), in ``value_range``)
        after each value; each is wrong at any of the planned ``looks`` with probability at most
        ``alpha`` under ``assumption``."""

    @abstractmethod
    def assumption(self, alpha: float, threshold: float) -> str:
        """What a PASS by this method rests on, in the user's words, at ``threshold`` (max drop, or
        the min SR)."""


@dataclass(frozen=True)
class Betting(Method):
    """The betting confidence sequence: valid for any distribution of the per-seed values."""

    name: ClassVar[str] = "betting confidence sequence"
    interval: ClassVar[str] = "CS"
    batch: ClassVar[int | None] = 100  # it holds a grid x seeds array per replication
    reason: str

    def bounds(self, values, alpha, looks, value_range):
        low, high = value_range
        lower, upper = betting_bounds((np.asarray(values, dtype=float) - low) / (high - low), alpha)
        return low + (high - low) * lower, low + (high - low) * upper

    def assumption(self, alpha: float, threshold: float) -> str:
        return "nothing of how seeds move the tasks (valid for any per-seed values)"


@dataclass(frozen=True)
class TTest(Method):
    """The group-sequential t test, its variance at least ``floor``; nothing before ``MIN_SEEDS`` values."""

    name: ClassVar[str] = "group-sequential t test"
    interval: ClassVar[str] = "bounds"
    reason: str
    floor: float
    """The smallest variance it believes (``variance_floor``, or the boundary's in ``seed_model``)."""

    def bounds(self, values, alpha, looks, value_range):
        low, high = value_range
        values = np.asarray(values, dtype=float)
        lower, upper = t_bounds(values, pocock_level(looks, alpha), self.floor, value_range)
        early = np.arange(values.shape[-1]) < MIN_SEEDS - 1
        return np.where(early, low, lower), np.where(early, high, upper)

    def assumption(self, alpha: float, threshold: float) -> str:
        return (
            f"smooth seeds ({SMOOTH_SEEDS}): the per-seed values spread no more unevenly than the latent-seed "
            "model allows, which a policy failing every task on a few seeds breaks"
        )


@dataclass(frozen=True)
class GuardedTTest(TTest):
    """The t test with the broken-seed guard: no PASS before a regression concentrated on whole
    seeds, large enough to pass the threshold, would have shown (``broken_seed_bounds``)."""

    name: ClassVar[str] = "group-sequential t test with the broken-seed guard"
    broken_drop: float | None = None
    """What a broken seed (every task failing) adds to the mean drop: the baseline's split SR; None
    when the values are per-seed SRs (``--vla-min-sr``), which a broken seed takes to 0."""

    def bounds(self, values, alpha, looks, value_range):
        lower, upper = super().bounds(values, alpha, looks, value_range)
        return broken_seed_bounds(values, lower, upper, alpha, self.broken_drop, self.floor)

    def guard_seeds(self, alpha: float, threshold: float) -> tuple[float, int] | None:
        """Against a baseline: the least share of broken seeds that drops the split SR by more than
        ``threshold``, and the fewest seeds that show one of them with probability 1 - alpha (the
        earliest PASS). None with per-seed SRs, where both depend on the SR seen so far."""
        if self.broken_drop is None:
            return None
        share = min(1.0, threshold / self.broken_drop) if self.broken_drop > 0 else 1.0
        level = alpha * BROKEN_ALPHA_SHARE
        return share, 1 if share >= 1 else math.ceil(math.log(level) / math.log(1 - share))

    def assumption(self, alpha: float, threshold: float) -> str:
        guard = self.guard_seeds(alpha, threshold)
        if guard is None:
            shown = "the share of seeds failing every task that the seeds so far cannot rule out is allowed for"
        else:
            share, seeds = guard
            shown = (
                f"a policy failing every task on {share:.1%} of the seeds or more (a drop above {threshold:g} from "
                f"the baseline's {self.broken_drop:.2f}) shows such a seed within {seeds} seeds with probability "
                f"{1 - alpha * BROKEN_ALPHA_SHARE:.1%}, and no PASS comes sooner"
            )
        return f"smooth seeds, or whole seeds broken at random ({RANDOM_BREAKS}): {shown}"


def broken_seed_bounds(
    values: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    alpha: float,
    broken_drop: float | np.ndarray | None,
    floor: float | np.ndarray = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Widen running bounds by what broken seeds (every task failing) could hide. After n seeds of
    which k look broken, their share is at most ``q_up = broken_share_bound(k, n)`` at level alpha.
    Against a baseline they add ``broken_drop`` (the baseline's split SR) times their share to the
    drop, so the upper bound is at least ``broken_drop`` x q_up; with per-seed SRs (``broken_drop``
    None) they take their share of the SR away, so the lower bound is at most mean x (1 - q_up).
    A seed looks broken when its drop is at least half ``broken_drop`` (its SR at most half the
    running mean) and further from the rest than ``BROKEN_SPREAD`` standard deviations of a seed
    (``floor``): with few tasks a broken seed cannot be told from an unlucky one, and then only the
    count of none applies. With none seen the bound is 1 - alpha^(1/n), and those events nest (no
    broken seed in n means none in fewer), so looking again spends no more alpha; counting keeps
    one or two broken seeds in a small sample, whose drops the t test's symmetric bounds underrate,
    from passing for a smooth run."""
    values = np.asarray(values, dtype=float)
    seeds = values.shape[-1]
    n = np.arange(1, seeds + 1)
    table = _broken_share_table(max(seeds, BROKEN_TABLE_SEEDS), alpha * BROKEN_ALPHA_SHARE)
    spread = BROKEN_SPREAD * np.sqrt(np.asarray(floor, dtype=float))
    if broken_drop is None:
        mean = np.cumsum(values, axis=-1) / n
        line = np.minimum(mean / 2, mean - spread)
        seen = np.tril(np.ones((seeds, seeds), dtype=bool))  # seen[n - 1, i]: seed i is among the first n
        broken = ((values[..., None, :] <= line[..., :, None]) & seen).sum(axis=-1)
        return np.minimum(lower, mean * (1.0 - table[n, broken])), upper
    drop = np.asarray(broken_drop, dtype=float)
    broken = np.cumsum(values >= np.maximum(drop / 2, spread), axis=-1)
    return lower, np.maximum(upper, drop * table[n, broken])


BROKEN_SPREAD = 3.0
"""How many standard deviations of a seed's value (the t test's floor) a seed must stand out by to count as broken."""
BROKEN_ALPHA_SHARE = 0.5
"""The share of alpha the guard spends: a wrong PASS comes either from broken seeds not seen yet or
from the t test on the seeds seen, so each route gets its part (with all of alpha on the guard,
``scripts/gate_simulation.py --family broken`` saw 0.07 to 0.11 wrong PASSes where the true drop sits
within 2% above max drop; with half, 0.02 to 0.04 there)."""
BROKEN_TABLE_SEEDS = 300
"""The share bounds are computed once for this many seeds (more when a run has more)."""
BROKEN_SEEN_MOST = 40
"""More seeds than this looking broken: no share bound is computed, the bound is 1 (no PASS by the t test)."""


@functools.cache
def _broken_share_table(seeds: int, alpha: float) -> np.ndarray:
    """``[n, k]``: the one-sided (1 - alpha) upper bound of a share of which k of n draws showed
    (Clopper and Pearson, Biometrika 26(4), 1934: the q with P(Bin(n, q) <= k) = alpha), n up to
    ``seeds``; 1 beyond ``BROKEN_SEEN_MOST``. Bisection on every (n, k) at once."""
    n = np.arange(1, seeds + 1)[:, None, None]
    k = np.arange(BROKEN_SEEN_MOST + 1)[None, :, None]
    j = np.arange(BROKEN_SEEN_MOST + 1)[None, None, :]  # the terms of P(Bin(n, q) <= k)
    log_gamma = np.vectorize(math.lgamma)
    choose = log_gamma(n + 1.0) - log_gamma(j + 1.0) - log_gamma(np.maximum(n - j, 0) + 1.0)
    log_choose = np.where((j <= k) & (j <= n), choose, -np.inf)  # only the terms of the sum
    low, high = np.broadcast_to(k / n, (seeds, len(k[0]), 1)).copy(), np.ones((seeds, len(k[0]), 1))
    for _ in range(40):
        middle = np.clip((low + high) / 2, 1e-12, 1 - 1e-12)
        terms = np.exp(log_choose + j * np.log(middle) + (n - j) * np.log1p(-middle))
        cdf = terms.sum(axis=-1, keepdims=True)
        low, high = np.where(cdf > alpha, middle, low), np.where(cdf > alpha, high, middle)
    table = np.ones((seeds + 1, seeds + 1))
    columns = min(len(k[0]), seeds + 1)
    table[1:, :columns] = np.where(k >= n, 1.0, high)[:, :columns, 0]
    return table


ASSUMPTION_FREE_MOST = 400
"""How far ``assumption_free_seeds`` looks."""


@functools.cache
def assumption_free_seeds(alpha: float, threshold: float, min_sr: bool = False) -> int | None:
    """The fewest seeds at which the betting sequence can PASS at all (every seed with no drop, or
    every task succeeding on every seed): what assuming nothing costs (None: more than
    ``ASSUMPTION_FREE_MOST``)."""
    best, value_range = (1.0, (0.0, 1.0)) if min_sr else (0.0, (-1.0, 1.0))
    lower, upper = Betting("").bounds(np.full((1, ASSUMPTION_FREE_MOST), best), alpha, 1, value_range)
    passed = lower[0] >= threshold if min_sr else upper[0] <= threshold
    first = np.nonzero(passed)[0]
    return int(first[0]) + 1 if first.size else None


def pass_rests_on(method: Method, alpha: float, threshold: float, min_sr: bool = False) -> str:
    """The sentence a PASS carries: what it assumes, and what assuming nothing would cost."""
    if isinstance(method, Betting):
        return f"a PASS assumes {method.assumption(alpha, threshold)}"
    seeds = assumption_free_seeds(alpha, threshold, min_sr)
    cost = f"at least {seeds} seeds" if seeds else f"more than {ASSUMPTION_FREE_MOST} seeds"
    return (
        f"a PASS assumes {method.assumption(alpha, threshold)}; assuming nothing "
        f"(--vla-gate-assume={NOTHING}), a PASS takes {cost}"
    )


REFERENCE, OBSERVED = "reference SRs", "observed task SRs"
"""What the rule's SRs are: the baseline's (or the min SR), or the current run's so far (min-SR looks)."""


def _betting_first(tasks: int, seeds: int, assume: str) -> Betting | None:
    """The betting sequence where neither rule may take the t test: nothing assumed, or too few
    tasks or seeds for it."""
    if assume == NOTHING:
        return Betting("assuming nothing of the seeds")
    if tasks < MIN_TASKS:
        return Betting(f"{tasks} tasks < {MIN_TASKS}")
    if seeds < MIN_SEEDS:
        return Betting(f"{seeds} seeds < {MIN_SEEDS}")
    return None


def choose(
    tasks: int, seeds: int, spread: float, floor: float, srs_are: str = REFERENCE, assume: str = RANDOM_BREAKS
) -> Method:
    """The method for ``tasks`` compared tasks, a budget of ``seeds`` and the mean p (1 - p) of
    the SRs the rule looks at, ``srs_are`` (see the module docstring), per-seed SRs as the values."""
    betting = _betting_first(tasks, seeds, assume)
    if betting:
        return betting
    if spread < MIN_SPREAD:
        return Betting(f"{srs_are} near 0 or 1: mean p(1-p) {spread:.3f} < {MIN_SPREAD:.3f}")
    reason = f"{tasks} tasks, {seeds} seeds, {srs_are}' mean p(1-p) {spread:.3f}"
    return TTest(reason, floor) if assume == SMOOTH_SEEDS else GuardedTTest(reason, floor)


def method_for(srs: Sequence[float], seeds: int, srs_are: str = REFERENCE, assume: str = RANDOM_BREAKS) -> Method:
    """The method for tasks at these SRs and a budget of ``seeds``."""
    srs = list(srs)
    spread = sum(p * (1 - p) for p in srs) / len(srs)
    return choose(len(srs), seeds, spread, variance_floor(srs, seeds), srs_are, assume)


def drop_method(
    srs: Sequence[float], seed_means: Sequence[float], seeds: int, max_drop: float, assume: str = RANDOM_BREAKS
) -> Method:
    """The method for a drop against a baseline with task SRs ``srs`` and per-seed means
    ``seed_means`` (its seeds complete on every task), a budget of ``seeds`` and ``max_drop``.

    The t test's floor here is the variance the per-seed drop has at the boundary, a drop of
    ``max_drop`` on every task, in the latent-seed model (``seed_model``) at the baseline's SRs and
    at the upper end of the seed correlation its per-seed means show. That floor is what the
    observed variance misses early when the SRs sit near 0 or 1 (the drop then falls on a few
    seeds), so unlike ``method_for`` no SR spread is required. Unless the user assumes smooth
    seeds, the broken-seed guard holds PASS back until whole broken seeds would have shown."""
    srs = list(srs)
    betting = _betting_first(len(srs), seeds, assume)
    if betting:
        return betting
    rho = float(seed_correlation(np.asarray(seed_means), np.asarray(srs)))
    floor = max(variance_floor(srs, seeds), boundary_variance(srs, seeds, max_drop, rho))
    reason = (
        f"{len(srs)} tasks, {seeds} seeds, variance floor at a drop of {max_drop:g} from the baseline's task SRs "
        f"and seed correlation {rho:.2f}"
    )
    if assume == SMOOTH_SEEDS:
        return TTest(reason, floor)
    return GuardedTTest(reason, floor, broken_drop=sum(srs) / len(srs))


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
