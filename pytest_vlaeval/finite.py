"""Arithmetic that stays finite on finite inputs, for every floor: a benchmark file's extras
(``spec``) and the canonical files' means (``results``) reduce episode values with it. A leaf."""

from __future__ import annotations

import math
from collections.abc import Sequence


def finite_mean(values: Sequence[float]) -> float:
    """The mean of finite numbers, finite whatever their size: two returns of 1e308 sum to infinity,
    so where the plain sum overflows, the shares are summed instead (and kept within the values)."""
    total = sum(values)
    if math.isfinite(total):
        return total / len(values)
    shares = sum(value / len(values) for value in values)
    return min(max(values), max(min(values), shares))
