"""``compare.html``: the split and group SRs as curves across the runs (e.g. checkpoints) with
their interval bands, drawn as inline SVG (``templates/curves.svg.j2``), and the comparison's table."""

from __future__ import annotations

from typing import Any

from pytest_vlaeval.report.comparison import OVERALL, Comparison, PairedDifference, Row
from pytest_vlaeval.report.page import interval, pct, render

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 820, 320, 100, 200, 16, 40
COLORS = ("#0b4f9c", "#c4432b", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#cf222e", "#57606a")


def render_comparison(comparison: Comparison) -> str:
    heads = [_short(run.label) for run in comparison.runs]
    heads += [f"{_short(run.label)} - first" for run in comparison.runs[1:]]
    return render(
        "compare.html.j2",
        title=f"{comparison.benchmark} {comparison.split}: {len(comparison.runs)} runs compared",
        runs=comparison.runs,
        interval_method=comparison.interval_method,
        note=comparison.note,
        made_with=comparison.made_with,
        chart=chart(comparison),
        heads=heads,
        axes=sorted({row.axis for row in comparison.rows}),
        rows=[{"axis": row.axis, "name": row.name, "cells": _cells(row)} for row in comparison.rows],
    )


def chart(comparison: Comparison) -> dict[str, Any]:
    """The curves' geometry: one line per split or group over the runs in order, its interval as a band."""
    count = len(comparison.runs)
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return round(LEFT + (plot_width * index / (count - 1) if count > 1 else plot_width / 2), 1)

    def y(value: float) -> float:
        return round(TOP + plot_height * (1 - value), 1)

    curves = []
    for number, row in enumerate(comparison.curves):
        points = [(i, e) for i, e in enumerate(row.estimates) if e is not None]
        if not points:
            continue
        name = _curve_name(row)
        band = ""
        if len(points) > 1:
            upper = [f"{x(i)},{y(e.interval[1])}" for i, e in points]
            lower = [f"{x(i)},{y(e.interval[0])}" for i, e in reversed(points)]
            band = " ".join(upper + lower)
        ((first_index, first),) = points[:1]
        curves.append(
            {
                "name": name,
                "short_name": _short(name, 24),
                "color": COLORS[number % len(COLORS)],
                "band": band,
                "bar": {"x": x(first_index), "low": y(first.interval[0]), "high": y(first.interval[1])},
                "line": " ".join(f"{x(i)},{y(e.sr)}" for i, e in points),
                "width": 3 if row.kind == OVERALL else 1.5,
                "points": [{"x": x(i), "y": y(e.sr)} for i, e in points],
                "legend_y": TOP + 14 * number + 6,
            }
        )
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": LEFT + plot_width,
        "axis_y": HEIGHT - BOTTOM + 16,
        "legend_x": WIDTH - RIGHT + 12,
        "ticks": [{"y": y(tick), "label": f"{100 * tick:.0f}%"} for tick in (0, 0.25, 0.5, 0.75, 1)],
        "runs": [{"x": x(i), "label": _short(run.label)} for i, run in enumerate(comparison.runs)],
        "curves": curves,
    }


def _curve_name(row: Row) -> str:
    return f"{row.name} split (overall)" if row.kind == OVERALL else f"{row.axis} {row.name}"


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _cells(row: Row) -> list[dict[str, Any]]:
    cells = [
        {"value": -1, "text": "-"} if e is None else {"value": e.sr, "text": f"{pct(e.sr)} {interval(e.interval)}"}
        for e in row.estimates
    ]
    cells += [_difference_cell(d) for d in row.differences]
    return cells


def _difference_cell(difference: PairedDifference | None) -> dict[str, Any]:
    if difference is None:
        return {"value": 0, "text": "-"}
    return {"value": difference.difference, "text": format_difference(difference)}


def format_difference(difference: PairedDifference) -> str:
    low, high = difference.interval
    return (
        f"{100 * difference.difference:+.1f} [{100 * low:+.0f}, {100 * high:+.0f}] pts, "
        f"{difference.seeds} seeds, {difference.method}"
    )
