"""``report.md``: the run in a few lines and tables (also appended to the CI step summary).

Every value from data (a group, a label, the benchmark's title and grid total, a policy's name: a
received run or benchmark file chooses them) goes in through ``markdown_text``, so it renders as
the text it is: never a tag, an image, a link, emphasis, a heading, or another cell or row.
"""

from __future__ import annotations

import html
import re

from pytest_vlaeval.gate.fixed import GateResult
from pytest_vlaeval.gate.sequential_gate import SequentialResult
from pytest_vlaeval.gate.verdict import Verdict
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.report.axes import grid_table, group_rates, interval_units, other_numbers, summary_axes
from pytest_vlaeval.report.page import interval, pct
from pytest_vlaeval.schema import RunSummary, TaskResult

MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]|~])")
"""What GitHub-flavoured markdown reads as markup inside a line: escapes, code, emphasis,
strikethrough, links and images, table cells."""


def markdown_text(value: object) -> str:
    """``value`` as literal text in GitHub-flavoured markdown and the HTML it may hold: control
    characters and line breaks as their escapes (``terminal_safe``: a table row stays one line, and
    the file prints safely), ``<``, ``>`` and ``&`` as entities, markdown's specials and a leading
    ``#`` backslash-escaped."""
    text = MARKDOWN_SPECIALS.sub(r"\\\1", html.escape(terminal_safe(str(value)), quote=False))
    return "\\" + text if text.startswith("#") else text


def markdown_report(summary: RunSummary, per_task: list[TaskResult], verdict: Verdict | None, policy: str) -> str:
    """``report.md``: split, memory-type and per-task SR with 95% intervals, and the gate verdict."""
    lines = [
        f"## {markdown_text(summary['benchmark'])}: {markdown_text(summary['selected_split'])} split, "
        f"policy {markdown_text(policy)}",
        "",
        f"Split SR **{pct(summary['sr_split'])}** {interval(summary['sr_split_ci95'])} "
        f"({summary['n_completed']}/{summary['n_expected']} episodes completed, {summary['n_errors']} errors"
        f"{', partial' if summary['partial'] else ''}).",
        "",
    ]
    lines += [markdown_text("; ".join(other_numbers(summary))) + ".", ""]
    grid = grid_table(summary)
    if grid:
        lines += [
            f"| {markdown_text(grid['corner'])} | {' | '.join(map(markdown_text, grid['columns']))} |",
            f"| --- |{' ---: |' * len(grid['columns'])}",
            *(
                f"| {markdown_text(row)} | {' | '.join(pct(sr) if sr is not None else '-' for sr in cells)} |"
                for row, cells in grid["rows"]
            ),
            "",
            f"Total **{pct(grid['total'])}** {interval(grid['total_ci95'])}: {markdown_text(grid['note'])}",
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
    lines += [f"| group | SR | 95% CI ({markdown_text(interval_units(summary))} as clusters) |", "| --- | ---: | --- |"]
    lines += [
        f"| {markdown_text(f'{axis.label} {group}')} | {pct(sr)} | {interval(bounds)} |"
        for axis in axes
        for group, sr, bounds in group_rates(axis, summary)
    ]
    lines += [
        "",
        f"| task | {' | '.join(markdown_text(a.label) for a in axes)} | episodes | SR | Wilson 95% CI | errors |",
        f"| --- | {'--- | ' * len(axes)}---: | ---: | --- | ---: |",
    ]
    lines += [
        f"| {markdown_text(r['env_id'])} | {' | '.join(markdown_text(r[a.field]) for a in axes)} | {r['n_episodes']}/{r['n_expected']} | {pct(r['sr'])} | {interval(r['sr_ci95'])} | {r['n_errors']} |"  # type: ignore[literal-required]
        for r in per_task
    ]
    if isinstance(verdict, GateResult) and verdict.tasks:
        lines += [
            "",
            "| task | baseline SR | SR | drop | paired seeds | McNemar p |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {markdown_text(t.env_id)} | {pct(t.baseline_sr)} | {pct(t.current_sr)} | {t.drop:+.3f} | {t.paired_seeds} | "
            f"{'-' if t.p_value is None else f'{t.p_value:.4g}'} |"
            for t in verdict.tasks
        ]
    return "\n".join(lines) + "\n"
