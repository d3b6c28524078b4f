"""The choices of ``--vla-render``, ``--vla-video`` and ``--vla-live``, and the ranges of the
numeric options: one owner, a leaf that imports only the standard library, so ``plugin`` (which
must stay light) declares them and the modules acting on a choice share it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

RENDER_BACKENDS = ("auto", "gpu", "gpu-render", "cpu")
"""``gpu``: simulate and render on the GPU; ``gpu-render``: simulate on the CPU, render on the GPU;
``cpu``: both on the CPU (software rendering); ``auto``: ``gpu`` when a CUDA device is present, else ``cpu``."""
VIDEO_MODES = ("none", "failed", "all")
LIVE_MODES = ("auto", "on", "off")


def in_range(
    kind: type[int] | type[float], low: float | None = None, high: float | None = None, *, open_ends: str = ""
) -> Callable[[str], float]:
    """An argparse ``type=`` that refuses a value outside [low, high] (``open_ends`` "low", "high"
    or "both" excludes that bound; a missing bound is unbounded) or not finite, as the option is
    parsed, with one line naming the range and the value."""

    def convert(text: str) -> float:
        value = kind(text)  # a ValueError: argparse says "invalid int value: 'x'"
        below = low is not None and (value <= low if open_ends in ("low", "both") else value < low)
        above = high is not None and (value >= high if open_ends in ("high", "both") else value > high)
        if below or above or not math.isfinite(value):
            left = "(" if open_ends in ("low", "both") or low is None else "["
            right = ")" if open_ends in ("high", "both") or high is None else "]"
            bounds = f"{left}{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}{right}"
            raise argparse.ArgumentTypeError(f"must be in {bounds}, got {value:g}")
        return value

    convert.__name__ = kind.__name__
    return convert
