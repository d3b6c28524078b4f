"""``vlaeval compare RUN [RUN ...]``: run directories (e.g. one per checkpoint, or lerobot-eval's
output) side by side, in the order given: prints the table, writes ``compare.md`` and ``compare.html``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_vlaeval.errors import ResultsUnwritable
from pytest_vlaeval.printable import terminal_lines, terminal_safe
from pytest_vlaeval.report.compare_html import format_difference, render_comparison
from pytest_vlaeval.report.comparison import TASK, Comparison, ComparisonError, Run, compare
from pytest_vlaeval.report.markdown import markdown_text
from pytest_vlaeval.report.page import interval, pct
from pytest_vlaeval.results.store import write_text_atomic

MARKDOWN = "compare.md"
HTML = "compare.html"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Compare runs (e.g. one per checkpoint) with the first: SRs, intervals, paired differences."
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run directories, in the order to show; lerobot-eval's output as DIR:seed=N (its --seed)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("."), help=f"folder for {MARKDOWN} and {HTML} [current directory]"
    )


def run(args: argparse.Namespace) -> int:
    try:
        comparison = compare(args.runs)
    except ComparisonError as exc:
        print(terminal_safe(f"vlaeval compare: {exc}"), file=sys.stderr)
        return 2
    markdown = markdown_table(comparison)
    print(terminal_lines(markdown), end="")
    try:
        write_text_atomic(args.out / MARKDOWN, markdown)
        write_text_atomic(args.out / HTML, render_comparison(comparison))
    except ResultsUnwritable as exc:
        print(terminal_safe(f"vlaeval compare: {exc}"), file=sys.stderr)
        return 2
    print(terminal_lines(f"\nwritten: {args.out / MARKDOWN}, {args.out / HTML}"))
    return 0


def markdown_table(comparison: Comparison) -> str:
    """The side-by-side table (also what the command prints: a markdown table reads as text); every
    name in it (a run's folder and policy, a group, a task) goes in through ``markdown_text``."""
    runs = comparison.runs
    lines = [
        f"## {markdown_text(comparison.benchmark)} {markdown_text(comparison.split)}: {len(runs)} runs",
        "",
        *(
            f"{n}. {markdown_text(run.label)} (policy {markdown_text(run.policy)}{_metrics(run)})"
            for n, run in enumerate(runs, 1)
        ),
        "",
        *([markdown_text(comparison.note), ""] if comparison.note else []),
        *([markdown_text(comparison.made_with), ""] if comparison.made_with else []),
        "SR with its 95% interval; `N - 1`: run N minus run 1, paired on shared seeds "
        "(difference in points [95% interval], paired seeds, the method the gate would use for them).",
        "",
        "| row | "
        + " | ".join(str(n) for n in range(1, len(runs) + 1))
        + "".join(f" | {n} - 1" for n in range(2, len(runs) + 1))
        + " |",
        "| --- |" + " ---: |" * (2 * len(runs) - 1),
    ]
    for row in comparison.rows:
        name = row.name if row.kind == TASK else f"{row.axis} {row.name}"
        cells = ["-" if e is None else f"{pct(e.sr)} {interval(e.interval)}" for e in row.estimates]
        cells += ["-" if d is None else format_difference(d) for d in row.differences]
        lines.append(f"| {markdown_text(name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _metrics(run: Run) -> str:
    """The run's own numbers after its policy (``; pc_success 60, avg_max_reward 0.8``), if it has any."""
    numbers = ", ".join(f"{markdown_text(key)} {value}" for key, value in run.metrics)
    return f"; {numbers}" if numbers else ""
