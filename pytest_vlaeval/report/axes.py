"""The axes a run's tasks are grouped by, as its ``summary.json`` lists them (the benchmark file
declares them: MIKASA's split and memory type, LIBERO's suite), and the group SRs along each.
Every reader of groups (reports, chart, compare, ``evaluate``) reads them from here."""

from __future__ import annotations

from pytest_vlaeval.results.schema import Summary
from pytest_vlaeval.spec import SPLIT_AXIS, Axis


def summary_axes(summary: Summary) -> tuple[Axis, ...]:
    """The run's axes, the split's first; a summary that lists none (a reference runner's) has
    the split's."""
    entries = summary.get("axes")
    if not entries:
        return (SPLIT_AXIS,)
    return tuple(Axis(e["field"], e["label"], e["summary"]) for e in entries)


def group_rates(axis: Axis, summary: Summary) -> list[tuple[str, float, list[float]]]:
    """``(group, SR, 95% interval)`` along ``axis`` for every group the run has results for."""
    rates: dict[str, float] = summary.get(axis.summary, {})  # type: ignore[assignment]
    intervals: dict[str, list[float]] = summary.get(axis.intervals, {})  # type: ignore[assignment]
    return [(name, sr, intervals[name]) for name, sr in rates.items()]
