"""The choices of ``--vla-render``, ``--vla-video``, ``--vla-live``, ``--vla-policy-placement`` and ``--vla-gate-assume``, the ranges of the
numeric options and the refusal of an empty name: one owner, a leaf that imports only the
standard library, so ``plugin`` (which must stay light) declares them and the modules acting on a
choice share it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

RENDER_BACKENDS = ("auto", "gpu", "gpu-render", "cpu")
"""``gpu``: simulate and render on the GPU; ``gpu-render``: simulate on the CPU, render on the GPU;
``cpu``: both on the CPU (software rendering); ``auto``: ``gpu`` when a CUDA device is present, else ``cpu``."""
VIDEO_MODES = ("none", "failed", "all")
LIVE_MODES = ("auto", "on", "off")
POLICY_PLACEMENTS = ("auto", "beside", "served")
"""Where a policy with an interpreter of its own runs (``--vla-policy-placement``), the default
first: beside the env in each worker, or served from one process (``distribute.policy_placement``)."""
NOTHING, RANDOM_BREAKS, SMOOTH_SEEDS = "nothing", "random-breaks", "smooth-seeds"
GATE_ASSUMPTIONS = (RANDOM_BREAKS, NOTHING, SMOOTH_SEEDS)
"""What a user lets the gate assume of how seeds move the tasks (``--vla-gate-assume``), the default
first: ``nothing`` (the betting sequence everywhere), ``random-breaks`` (the t test where the rule
allows, no PASS before a share of broken seeds that would pass the threshold would have shown), or
``smooth-seeds`` (the t test alone: the latent-seed model's spread, no guard); ``gate.methods``."""
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


DEFAULT_MAX_DROP, DEFAULT_ALPHA, DEFAULT_UNDECIDED_EXIT = 0.05, 0.05, 7
GATE_DEFAULTS = {
    "max_drop": DEFAULT_MAX_DROP,
    "alpha": DEFAULT_ALPHA,
    "assume": RANDOM_BREAKS,
    "undecided_exit": DEFAULT_UNDECIDED_EXIT,
}
"""The gate's defaults, for every command that gates (``gate.settings.GateSettings`` holds them)."""


def gate_options(prefix: str = "") -> dict[str, tuple[dict[str, Any], str, str | None]]:
    """The gate's options by name (without the ``--``): argparse keywords, help, and the key of
    their default in ``GATE_DEFAULTS`` (None: no default)."""
    gate = "gate-" if prefix else ""
    return {
        "baseline": ({"metavar": "DIR"}, "gate against a run directory (ours, or the reference runner's per-task "
                     "JSON), or lerobot-eval's output as DIR:seed=N (its --seed)", None),
        "max-drop": ({"type": in_range(float, 0, 1), "metavar": "X"}, "largest allowed split-SR drop vs the baseline",
                     "max_drop"),
        f"{gate}alpha": ({"type": in_range(float, 0, 1, open_ends="both"), "metavar": "A"},
                         "the gate's error rate: FAIL only when the drop is above max drop at this level, PASS "
                         "(sequential) only when it is surely at or below", "alpha"),
        f"{gate}assume": ({"choices": GATE_ASSUMPTIONS}, f"what a gate's PASS may assume of how seeds move the "
                          f"tasks: {RANDOM_BREAKS} (smooth seeds, or whole seeds broken at random: no PASS before "
                          f"broken seeds would have shown), {SMOOTH_SEEDS} (decides sooner; a policy failing every "
                          f"task on a few seeds can PASS wrongly) or {NOTHING} (valid for any data; needs the most "
                          "seeds)", "assume"),
        "undecided-exit": ({"type": in_range(int, 0, 255), "metavar": "CODE"}, "exit status when the gate cannot "
                           "decide: the budget (--episodes) ran out or is too small", "undecided_exit"),
    }  # fmt: skip


def add_gate_options(add: Callable[..., Any], *, prefix: str = "", defaults: bool = True) -> None:
    """Declare the gate's options once, for pytest (``prefix="vla-"``: ``--vla-baseline``,
    ``--vla-max-drop``, ...) and for ``vlaeval merge`` and ``vlaeval slurm`` (no prefix: ``--baseline``,
    ``--max-drop``, ...; slurm hands what was given to its merge, so ``defaults=False`` leaves an
    option not given None). ``add``: pytest's ``group.addoption`` or argparse's ``add_argument``."""
    for name, (kwargs, text, key) in gate_options(prefix).items():
        if key is None:
            add(f"--{prefix}{name}", **kwargs, help=text)
            continue
        given = GATE_DEFAULTS[key] if defaults else None
        add(f"--{prefix}{name}", **kwargs, default=given, help=f"{text} [{GATE_DEFAULTS[key]}]")
