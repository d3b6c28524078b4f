"""The axes a run's tasks are grouped by, as its ``summary.json`` lists them (the benchmark file
declares them: MIKASA's split and memory type, LIBERO's suite), and the group SRs along each;
the grid of two of them where the benchmark has one (LIBERO-PRO), and its own numbers.
Every reader of groups (reports, chart, compare, ``evaluate``) reads them from here."""

from __future__ import annotations

from typing import Any

from pytest_vlaeval.benchmark.model import SPLIT_AXIS, Axis
from pytest_vlaeval.report.page import interval, pct
from pytest_vlaeval.schema import RunSummary


def summary_axes(summary: RunSummary) -> tuple[Axis, ...]:
    """The run's axes, the split's first; a summary that lists none (a reference runner's) has
    the split's."""
    entries = summary.get("axes")
    if not entries:
        return (SPLIT_AXIS,)
    return tuple(Axis(e["field"], e["label"], e["summary"]) for e in entries)


def interval_units(summary: RunSummary) -> str:
    """What the group intervals take as independent units: the seeds, or the groups of the axis the
    benchmark names (LIBERO-Plus: its base tasks)."""
    field = summary.get("interval_clusters")
    labels = {a.field: a.label for a in summary_axes(summary)}
    return labels.get(field, field) if field else "seeds"


def group_rates(axis: Axis, summary: RunSummary) -> list[tuple[str, float, list[float]]]:
    """``(group, SR, 95% interval)`` along ``axis`` for every group the run has results for."""
    rates: dict[str, float] = summary.get(axis.summary, {})  # type: ignore[assignment]
    intervals: dict[str, list[float]] = summary.get(axis.intervals, {})  # type: ignore[assignment]
    return [(name, sr, intervals[name]) for name, sr in rates.items()]


def benchmark_metrics(summary: RunSummary) -> list[tuple[str, str]]:
    """``(key, value as text)`` of the benchmark's own summary numbers (Push-T: ``pc_success``,
    ``avg_max_reward``), as ``summary.json`` names them."""
    values = [(key, summary.get(key)) for key in summary.get("benchmark_metrics", [])]
    return [(key, "-" if value is None else f"{value:.4g}") for key, value in values]


SHOWN_CELLS = 6
"""The most missing cells a grid's note names one by one."""


def grid_table(summary: RunSummary) -> dict[str, Any] | None:
    """The grid as rows of cells for a table: ``{"corner", "columns", "rows": [(row, [SR or
    None, ...])], "total", "total_ci95", "note"}``; None without a grid."""
    grid = summary.get("grid")
    if not grid:
        return None
    labels = {a.field: a.label for a in summary_axes(summary)}
    columns = list(next(iter(grid["cells"].values()), {}))
    missing = grid["missing_cells"]
    note = f"{grid['total_definition']}."
    if missing:
        cells = len(columns) * len(grid["cells"])
        named = ", ".join(missing) if len(missing) <= SHOWN_CELLS else f"{len(missing)} cells"
        note += f" Over {cells - len(missing)} of {cells} cells, without {named}"
        unavailable = grid["unavailable_splits"]
        note += (
            f"; cannot run here: {', '.join(unavailable)} (summary.json, grid.unavailable_splits)."
            if unavailable
            else "."
        )
    return {
        "corner": f"{labels.get(grid['rows'], grid['rows'])} x {labels.get(grid['columns'], grid['columns'])}",
        "columns": columns,
        "rows": [(row, [cells[c] for c in columns]) for row, cells in grid["cells"].items()],
        "total": grid["total"],
        "total_ci95": grid["total_ci95"],
        "note": note,
    }


def other_numbers(summary: RunSummary) -> list[str]:
    """The run's numbers beside the split SR, as text: the SR pooled over episodes, the
    benchmark's own (``pc_success``...) and its grid's total."""
    numbers = [f"SR pooled over episodes {pct(summary.get('sr_pooled'))} {interval(summary.get('sr_pooled_ci95'))}"]
    numbers += [f"{key} {value}" for key, value in benchmark_metrics(summary)]
    grid = summary.get("grid")
    if grid:
        numbers.append(f"grid total {pct(grid['total'])}" + ("" if grid["complete"] else " (cells missing)"))
    return [n.rstrip() for n in numbers]


CHART_GROUPS = 40
"""The most groups an axis may have to be drawn (more are the group table's job)."""
CHART_LEFT, CHART_WIDTH, CHART_ROW, CHART_TITLE = 200, 360, 18, 26
"""The chart's geometry in pixels: where the bars start, their full width (SR 100%), a row, an axis's title."""


def axes_chart(summary: RunSummary) -> dict[str, Any] | None:
    """Every axis with at most ``CHART_GROUPS`` groups as rows of a bar chart (``axes.svg.j2``): each
    group's SR with its interval, and where the run holds the benchmark's control arm, the SR of the
    group's controls as a tick and the paired difference as text. Coordinates are computed here."""
    paired = summary.get("control_arm", {}).get("paired", {})
    blocks, y = [], 0
    for axis in summary_axes(summary):
        rates = group_rates(axis, summary)
        if not rates or len(rates) > CHART_GROUPS:
            continue
        y += CHART_TITLE
        versus = paired.get(axis.field, {})
        rows = []
        for name, sr, bounds in rates:
            vs = versus.get(name)
            note = pct(sr) + (
                f"; {100 * vs['difference']:+.1f} pts vs control {interval_points(vs['difference_ci95'])}" if vs else ""
            )
            rows.append(
                {
                    "group": name,
                    "y": y,
                    "bar": CHART_WIDTH * sr,
                    "low": CHART_LEFT + CHART_WIDTH * bounds[0],
                    "high": CHART_LEFT + CHART_WIDTH * bounds[1],
                    "control": CHART_LEFT + CHART_WIDTH * vs["control_sr"] if vs else None,
                    "note": note,
                }
            )
            y += CHART_ROW
        blocks.append({"label": axis.label, "title_y": y - CHART_ROW * len(rows) - 8, "rows": rows})
    if not blocks:
        return None
    return {
        "blocks": blocks,
        "left": CHART_LEFT,
        "width": CHART_LEFT + CHART_WIDTH + 260,
        "height": y + 6,
        "right": CHART_LEFT + CHART_WIDTH,
        "has_controls": bool(paired),
    }


def interval_points(bounds: list[float]) -> str:
    """A difference's interval in percentage points: ``[-20.1, -4.0]``."""
    return f"[{100 * bounds[0]:+.1f}, {100 * bounds[1]:+.1f}]"
