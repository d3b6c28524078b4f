"""The latent-seed model of a benchmark's outcomes, for the gate's variance floor.

Episode (t, s) succeeds when sqrt(rho) z_s + sqrt(1 - rho) e_ts < Phi^-1(p_t): a seed's
difficulty z_s is shared by every task (and by both runs of a paired comparison), so tasks
correlate through the seed with latent correlation rho, and task t succeeds with probability p_t
exactly. Given z, a task succeeds with probability q_t(z) = Phi((Phi^-1(p_t) - sqrt(rho) z) /
sqrt(1 - rho)), independently of the other tasks and of the other run. Hence, over a standard
normal z (Gauss-Hermite quadrature):

- one run's per-seed mean m_s = mean_t Y(t, s) has variance
  E[sum_t q_t (1 - q_t)] / T^2 + Var(mean_t q_t);
- the paired per-seed drop d_s = mean_t (Y_base - Y_now) has variance
  E[sum_t q_bt (1 - q_bt) + q_nt (1 - q_nt)] / T^2 + Var(mean_t (q_bt - q_nt)).

The second term is what makes a drop at high SRs hard to see early: shifting thresholds near 1
moves the hardest seeds most, so the drop concentrates on a few seeds when rho is large (at SRs
near 0.95, rho 0.8 and 38 tasks, d_s at a drop of 0.05 has about 3.7 times the variance of two
independent runs). ``seed_correlation`` reads rho back from a run's per-seed means by matching
the first formula, at the upper end of the sample variance's chi-square interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(48)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
RHOS = np.linspace(0.0, 0.95, 39)
"""The correlations ``seed_correlation`` chooses from (steps of 0.025)."""
RHO_LEVEL = 0.1
"""One-sided level of the sample variance's upper end, from which rho is read."""
MIN_SEED_MEANS = 10
"""Fewer per-seed means say too little: ``seed_correlation`` then answers the end of ``RHOS``."""
_NORMAL = NormalDist()


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi, vectorised (Abramowitz and Stegun 7.1.26 for erf, absolute error below 1.5e-7)."""
    x = np.asarray(x, dtype=float) / math.sqrt(2.0)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-a * a)
    return 0.5 * (1.0 + np.sign(x) * erf)


def thresholds(srs: np.ndarray) -> np.ndarray:
    """Phi^-1 of each SR, cut just inside (0, 1): the latent level below which an episode succeeds."""
    clipped = np.clip(np.asarray(srs, dtype=float), 1e-9, 1 - 1e-9)
    return np.vectorize(_NORMAL.inv_cdf)(clipped) if clipped.size else clipped


def conditional_rates(srs: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """q_t(z) at the quadrature nodes: shape (*rho.shape, *srs.shape[:-1], nodes, tasks) for
    ``srs`` of shape (..., tasks) and ``rho`` of any shape."""
    rho = np.asarray(rho, dtype=float)[(...,) + (None,) * (np.ndim(srs) + 1)]
    levels = thresholds(srs)[..., None, :]
    z = _NODES[:, None]
    return normal_cdf((levels - np.sqrt(rho) * z) / np.sqrt(1.0 - rho))


def _moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance over the nodes axis (-1) with the quadrature weights."""
    mean = values @ _WEIGHTS
    return mean, (values**2) @ _WEIGHTS - mean**2


def run_variance(srs: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Var(m_s) of one run at task SRs ``srs`` (..., tasks) for each ``rho``."""
    q = conditional_rates(srs, rho)
    tasks = q.shape[-1]
    within, _ = _moments((q * (1 - q)).sum(axis=-1) / tasks**2)
    _, between = _moments(q.mean(axis=-1))
    return within + between


def paired_variance(base_srs: np.ndarray, drops: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Var(d_s) when task t drops from ``base_srs[t]`` by ``drops[t]`` (cut at 0), for each ``rho``."""
    base_srs = np.asarray(base_srs, dtype=float)
    now_srs = np.clip(base_srs - np.asarray(drops, dtype=float), 0.0, 1.0)
    qb, qn = conditional_rates(base_srs, rho), conditional_rates(now_srs, rho)
    tasks = qb.shape[-1]
    within, _ = _moments((qb * (1 - qb) + qn * (1 - qn)).sum(axis=-1) / tasks**2)
    _, between = _moments((qb - qn).mean(axis=-1))
    return within + between


def chi2_quantile(probability: float, df: int) -> float:
    """The chi-square quantile (Wilson and Hilferty's cube-root approximation)."""
    z = _NORMAL.inv_cdf(probability)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def seed_correlation(
    seed_means: np.ndarray, srs: np.ndarray, end: str = "upper", level: float = RHO_LEVEL
) -> np.ndarray:
    """The rho in ``RHOS`` at one end of what a run's per-seed means allow: the largest whose model
    variance of the per-seed means stays within the upper (``end="upper"``) or lower end (one-sided
    ``level``) of their sample variance. ``seed_means`` (..., seeds), ``srs`` the run's task SRs
    (..., tasks). The upper end at ``RHO_LEVEL`` is the conservative reading for the gate's floor: a
    larger floor, not a smaller one, when the seeds say little; with fewer than ``MIN_SEED_MEANS``
    seeds, or one task (its per-seed means vary as much at any rho), the end of ``RHOS`` on that side."""
    seed_means = np.asarray(seed_means, dtype=float)
    seeds = seed_means.shape[-1]
    if seeds < MIN_SEED_MEANS or np.shape(srs)[-1] < 2:
        return np.full(seed_means.shape[:-1], RHOS[-1] if end == "upper" else RHOS[0])
    quantile = level if end == "upper" else 1 - level
    bound = seed_means.var(axis=-1, ddof=1) * (seeds - 1) / chi2_quantile(quantile, seeds - 1)
    model = np.moveaxis(run_variance(np.asarray(srs, dtype=float), RHOS), 0, -1)  # (..., rhos)
    below = model <= bound[..., None]
    index = np.where(below.any(axis=-1), len(RHOS) - 1 - np.argmax(below[..., ::-1], axis=-1), 0)
    return RHOS[index]


def boundary_variance(base_srs: Sequence[float], seeds: int, max_drop: float, rho: float) -> float:
    """Var(d_s) at a drop of exactly ``max_drop`` on every task (cut at 0), at the baseline's task
    SRs smoothed by one success and one failure in ``seeds`` (an SR of 0 or 1 keeps some spread)."""
    smoothed = (np.asarray(base_srs, dtype=float) * seeds + 1) / (seeds + 2)
    return float(paired_variance(smoothed, np.full(len(smoothed), max_drop), np.asarray(rho)))
