"""``summary.png`` beside ``summary.json``: per-group SR along the benchmark's finest axis (MIKASA:
memory type; LIBERO: suite) and per-task SR, with 95% intervals;
every task of the selection is drawn, those without a completed episode marked "not evaluated"
so a partial picture never looks complete."""

from __future__ import annotations

import importlib.util
import io
import sys
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.report.axes import group_rates, summary_axes
from pytest_vlaeval.report.page import pct
from pytest_vlaeval.results.store import write_bytes_atomic
from pytest_vlaeval.schema import RunSummary, TaskResult

NOT_EVALUATED = "not evaluated"

TASK_ROWS = 100
"""The most task rows the chart draws: past that (LIBERO-Plus has 10,030 tasks) a row is
unreadable and the figure costs seconds per thousand rows, so it shows the tasks not evaluated
and the lowest SRs, and says so; every task is in ``report.html`` and the canonical JSON."""


def write_chart(summary: RunSummary, per_task: list[TaskResult], path: Path) -> Path | None:
    """Draw the run's success rates; None when there is nothing completed to draw or matplotlib
    (the ``chart`` extra) is not installed. Drawn in memory, then written as every file of a run
    is (``write_bytes_atomic``): a link at ``path`` is replaced, never written through."""
    figure = draw_chart(summary, per_task) if importlib.util.find_spec("matplotlib") else None
    if figure is None:
        path.unlink(missing_ok=True)  # a chart of an earlier session must not stand for this one
        return None
    plt = _pyplot()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=110)
    plt.close(figure)
    write_bytes_atomic(path, image.getvalue())
    return path


def warm() -> threading.Thread | None:
    """Import what drawing the chart needs (most of its second: ``matplotlib.pyplot``) on a thread
    of its own, for a session that has a core to spare before its end: the chart is then drawn
    without waiting for the import. None where matplotlib is not installed or pyplot is imported.
    Not a daemon: one stopped mid-import at the interpreter's exit could hold locks its exit needs."""
    if "matplotlib.pyplot" in sys.modules or importlib.util.find_spec("matplotlib") is None:
        return None
    thread = threading.Thread(target=_warm_import, name="vlaeval-chart-warm")
    thread.start()
    return thread


def _warm_import() -> None:
    with suppress(Exception):  # the drawing meets it again, where it is reported
        _pyplot()


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display). The backend is set before
    pyplot is imported: a drawing that starts while a warm-up imports finds it set (``use`` is then
    a no-op) and waits on the module's import lock."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _text(value: str) -> str:
    """A name from data as matplotlib draws it literally: a control character as its escape (no
    glyph to draw, and a warning that prints it to the terminal), ``$`` escaped (a ``$...$`` pair
    is parsed as mathtext, and an unknown symbol in it fails the whole figure)."""
    return terminal_safe(value).replace("$", r"\$")


def draw_chart(summary: RunSummary, per_task: list[TaskResult]) -> Any:
    """The chart's matplotlib figure; None when no task has a completed episode."""
    if not per_task:
        return None
    plt = _pyplot()
    axes = summary_axes(summary)
    split_axis, finest = axes[0], axes[-1]
    bars = group_rates(finest, summary)
    every = len(per_task) + len(summary["tasks_without_results"])
    missing = summary["tasks_without_results"][:TASK_ROWS]
    if every > TASK_ROWS:
        per_task = sorted(per_task, key=lambda r: r["sr"])[: TASK_ROWS - len(missing)]
    height = max(3.0, 0.22 * (len(per_task) + len(missing)) + 1.2)
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(12, height), gridspec_kw={"width_ratios": [1, 1.6]}, constrained_layout=True
    )
    _bars(left, [_text(g) for g, _, _ in bars], [sr for _, sr, _ in bars], [b for _, _, b in bars], "#4c72b0")
    split_note = ", ".join(f"{g} {pct(sr)}" for g, sr, _ in group_rates(split_axis, summary))
    note = f" ({split_axis.label} SR: {split_note})" if finest != split_axis else ""
    left.set_title(_text(f"per {finest.label}{note}"), fontsize=10)
    _bars(
        right,
        [r["env_id"] for r in per_task] + [f"{env_id} ({NOT_EVALUATED})" for env_id in missing],
        [r["sr"] for r in per_task],
        [r["sr_ci95"] for r in per_task],
        "#55a868",
    )
    for position in range(len(per_task), len(per_task) + len(missing)):
        right.barh(position, 1, color="none", edgecolor="#bbbbbb", hatch="//")
        right.text(0.5, position, NOT_EVALUATED, ha="center", va="center", fontsize=7, color="#777777")
    evaluated = f", {len(summary['tasks_without_results'])} tasks {NOT_EVALUATED}" if missing else ""
    shown = f"; the {len(per_task) + len(missing)} lowest of {every} tasks" if every > TASK_ROWS else ""
    right.set_title(
        f"per task ({summary['n_completed']}/{summary['n_expected']} episodes{evaluated}{shown})", fontsize=10
    )
    partial = " (partial)" if summary["partial"] else ""
    title = f"{summary['benchmark']} {summary['selected_split']}: {summary['model'].get('name', '')}{partial}"
    figure.suptitle(_text(title))
    return figure


def _bars(axis: Any, labels: list[str], values: list[float], intervals: list[list[float]], color: str) -> None:
    """Bars for the first ``len(values)`` labels; the labels after them get a row and no bar."""
    pairs = list(zip(values, intervals, strict=True))
    errors = [[max(0.0, v - lo) for v, (lo, _) in pairs], [max(0.0, hi - v) for v, (_, hi) in pairs]]  # rounding
    axis.barh(range(len(values)), values, xerr=errors, color=color, ecolor="#333333", capsize=2)
    axis.set_yticks(list(range(len(labels))), labels, fontsize=7 if len(labels) > 20 else 9)
    axis.invert_yaxis()
    axis.set_xlim(0, 1)
    axis.set_xlabel("success rate (95% CI)")
    axis.grid(axis="x", alpha=0.3)
