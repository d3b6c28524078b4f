"""``report.md``: the run in a few lines and tables (also appended to the CI step summary)."""

from __future__ import annotations

from pytest_vlaeval.gate.fixed import GateResult
from pytest_vlaeval.gate.sequential_gate import SequentialResult
from pytest_vlaeval.gate.verdict import Verdict
from pytest_vlaeval.report.axes import grid_table, group_rates, other_numbers, summary_axes
from pytest_vlaeval.report.page import interval, pct
from pytest_vlaeval.results.schema import Summary, TaskResult


def markdown_report(summary: Summary, per_task: list[TaskResult], verdict: Verdict | None, policy: str) -> str:
    """``report.md``: split, memory-type and per-task SR with 95% intervals, and the gate verdict."""
    lines = [
        f"## {summary['benchmark']}: {summary['selected_split']} split, policy `{policy}`",
        "",
        f"Split SR **{pct(summary['sr_split'])}** {interval(summary['sr_split_ci95'])} "
        f"({summary['n_completed']}/{summary['n_expected']} episodes completed, {summary['n_errors']} errors"
        f"{', partial' if summary['partial'] else ''}).",
        "",
    ]
    lines += ["; ".join(other_numbers(summary)) + ".", ""]
    grid = grid_table(summary)
    if grid:
        lines += [
            f"| {grid['corner']} | {' | '.join(grid['columns'])} |",
            f"| --- |{' ---: |' * len(grid['columns'])}",
            *(
                f"| {row} | {' | '.join(pct(sr) if sr is not None else '-' for sr in cells)} |"
                for row, cells in grid["rows"]
            ),
            "",
            f"Total **{pct(grid['total'])}** {interval(grid['total_ci95'])}: {grid['note']}",
            "",
        ]
    if verdict is not None:
        lines += [f"**{verdict.verdict()}**", ""]
    if isinstance(verdict, SequentialResult) and verdict.stopped:
        lines += [
            f"The sequential gate stopped early: {verdict.saved} episodes were not needed (not errors). "
            f"Complete the canonical run with `{verdict.resume_command}`.",
            "",
        ]
    axes = summary_axes(summary)
    lines += ["| group | SR | 95% CI (seeds as clusters) |", "| --- | ---: | --- |"]
    lines += [
        f"| {axis.label} {group} | {pct(sr)} | {interval(bounds)} |"
        for axis in axes
        for group, sr, bounds in group_rates(axis, summary)
    ]
    lines += [
        "",
        f"| task | {' | '.join(a.label for a in axes)} | episodes | SR | Wilson 95% CI | errors |",
        f"| --- | {'--- | ' * len(axes)}---: | ---: | --- | ---: |",
    ]
    lines += [
        f"| {r['env_id']} | {' | '.join(str(r[a.field]) for a in axes)} | {r['n_episodes']}/{r['n_expected']} | {pct(r['sr'])} | {interval(r['sr_ci95'])} | {r['n_errors']} |"  # type: ignore[literal-required]
        for r in per_task
    ]
    if isinstance(verdict, GateResult) and verdict.tasks:
        lines += [
            "",
            "| task | baseline SR | SR | drop | paired seeds | McNemar p |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {t.env_id} | {pct(t.baseline_sr)} | {pct(t.current_sr)} | {t.drop:+.3f} | {t.paired_seeds} | "
            f"{'-' if t.p_value is None else f'{t.p_value:.4g}'} |"
            for t in verdict.tasks
        ]
    return "\n".join(lines) + "\n"
