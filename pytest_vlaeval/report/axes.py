"""The axes a run's tasks are grouped by, as its ``summary.json`` lists them (the benchmark file
declares them: MIKASA's split and memory type, LIBERO's suite): the task field, its label, and
the summary's group SRs and intervals along it. Every reader of groups reads them from here."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vlaeval.results.schema import Summary
from pytest_vlaeval.spec import SPLIT_AXIS


@dataclass(frozen=True)
class Axis:
    field: str
    """The ``TaskResult`` field holding a task's group along this axis."""
    label: str
    rates: str
    """The ``Summary`` field with the group SRs along this axis."""
    intervals: str

    def groups(self, summary: Summary) -> list[tuple[str, float, list[float]]]:
        """``(group, SR, 95% interval)`` for every group the run has results for."""
        rates: dict[str, float] = summary.get(self.rates, {})  # type: ignore[assignment]
        intervals: dict[str, list[float]] = summary.get(self.intervals, {})  # type: ignore[assignment]
        return [(name, sr, intervals[name]) for name, sr in rates.items()]


def summary_axes(summary: Summary) -> tuple[Axis, ...]:
    """The run's axes, the split's first; a summary that lists none (a reference runner's) has
    the split's."""
    entries = summary.get("axes") or [
        {
            "field": SPLIT_AXIS.field,
            "label": SPLIT_AXIS.label,
            "summary": SPLIT_AXIS.summary,
            "intervals": SPLIT_AXIS.intervals,
        }
    ]
    return tuple(Axis(e["field"], e["label"], e["summary"], e["intervals"]) for e in entries)
