"""The axes a run's tasks are grouped by, in one place: the task field, its label, and the
summary's group SRs and intervals along it. A benchmark names its groups through these fields
(MIKASA: split and memory type; LIBERO: the suite is the split)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vlaeval.results.schema import Summary


@dataclass(frozen=True)
class Axis:
    field: str
    """The ``TaskResult`` field holding a task's value along this axis."""
    label: str
    rates: str
    """The ``Summary`` field with the group SRs along this axis."""
    intervals: str

    def groups(self, summary: Summary) -> list[tuple[str, float, list[float]]]:
        """``(group, SR, 95% interval)`` for every group the run has results for."""
        rates: dict[str, float] = summary[self.rates]  # type: ignore[literal-required]
        intervals: dict[str, list[float]] = summary[self.intervals]  # type: ignore[literal-required]
        return [(name, sr, intervals[name]) for name, sr in rates.items()]


GROUP_AXES = (
    Axis("split", "split", "sr_per_split", "sr_per_split_ci95"),
    Axis("memory_type", "memory type", "sr_per_memory_type", "sr_per_memory_type_ci95"),
)
