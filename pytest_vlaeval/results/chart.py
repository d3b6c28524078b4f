"""``summary.png`` beside ``summary.json``: per-memory-type and per-task SR with 95% intervals."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pytest_vlaeval.results.schema import Summary, TaskResult


def write_chart(summary: Summary, per_task: list[TaskResult], path: Path) -> Path | None:
    """Draw the run's success rates; None when there is nothing completed to draw or matplotlib
    (the ``chart`` extra) is not installed."""
    if not per_task or importlib.util.find_spec("matplotlib") is None:
        path.unlink(missing_ok=True)  # a chart of an earlier session must not stand for this one
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    memory = summary["sr_per_memory_type"]
    height = max(3.0, 0.22 * len(per_task) + 1.2)
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(12, height), gridspec_kw={"width_ratios": [1, 1.6]}, constrained_layout=True
    )
    _bars(left, list(memory), list(memory.values()), [summary["sr_per_memory_type_ci95"][m] for m in memory], "#4c72b0")
    split_note = ", ".join(f"{s} {100 * sr:.1f}%" for s, sr in summary["sr_per_split"].items())
    left.set_title(f"per memory type (split SR: {split_note})", fontsize=10)
    _bars(
        right, [r["env_id"] for r in per_task], [r["sr"] for r in per_task], [r["sr_ci95"] for r in per_task], "#55a868"
    )
    right.set_title(f"per task ({summary['n_completed']}/{summary['n_expected']} episodes)", fontsize=10)
    partial = " (partial)" if summary["partial"] else ""
    figure.suptitle(f"{summary['benchmark']} {summary['selected_split']}: {summary['model'].get('name', '')}{partial}")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _bars(axis: Any, labels: list[str], values: list[float], intervals: list[list[float]], color: str) -> None:
    positions = range(len(labels))
    pairs = list(zip(values, intervals, strict=True))
    errors = [[max(0.0, v - lo) for v, (lo, _) in pairs], [max(0.0, hi - v) for v, (_, hi) in pairs]]  # rounding
    axis.barh(positions, values, xerr=errors, color=color, ecolor="#333333", capsize=2)
    axis.set_yticks(list(positions), labels, fontsize=7 if len(labels) > 20 else 9)
    axis.invert_yaxis()
    axis.set_xlim(0, 1)
    axis.set_xlabel("success rate (95% CI)")
    axis.grid(axis="x", alpha=0.3)
