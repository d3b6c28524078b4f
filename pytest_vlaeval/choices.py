"""The choices of ``--vla-render``, ``--vla-video`` and ``--vla-live``, the ranges of the
numeric options and the refusal of an empty name: one owner, a leaf that imports only the
standard library, so ``plugin`` (which must stay light) declares them and the modules acting on a
choice share it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

RENDER_BACKENDS = ("auto", "gpu", "gpu-render", "cpu")
"""``gpu``: simulate and render on the GPU; ``gpu-render``: simulate on the CPU, render on the GPU;
``cpu``: both on the CPU (software rendering); ``auto``: ``gpu`` when a CUDA device is present, else ``cpu``."""
VIDEO_MODES = ("none", "failed", "all")
LIVE_MODES = ("auto", "on", "off")
EPISODE_LIST_MAX_MIB = 64
"""``--vla-episode-list`` larger than this is refused: about a million episodes' worth of pairs."""


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


def non_empty(what: str, example: str) -> Callable[[str], str]:
    """An argparse ``type=`` for an option that names ``what``: an empty value (``--policy=``, a
    variable that expanded to nothing) is refused as the option is parsed, with one line giving
    ``example``, where it would otherwise fall back to the default unseen."""

    def convert(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"is empty: name {what}, e.g. {example}")
        return text

    return convert
