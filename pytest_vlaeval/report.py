"""Terminal summary: per-task, per-split and per-memory-type success rates, from ``summary.json``.

Rendered with rich into the terminal reporter (plain text when output is not a terminal), so it
sits in pytest's own summary section and never interleaves with progress output.
"""

from __future__ import annotations

import io
from typing import Any

from pytest_vlaeval.session import RunContext


def render_summary(
    terminalreporter: Any, summary: dict[str, Any], per_task: list[dict[str, Any]], run: RunContext
) -> None:
    tr = terminalreporter
    tr.write_sep("=", f"vlaeval: {summary['benchmark']} {summary['selected_split']} split, policy {run.policy_spec}")
    if per_task:
        tr.write(_tables(tr, summary, per_task))
    tr.write_line(
        f"episodes: {summary['n_completed']} completed, {summary['n_errors']} errors, {summary['n_missing']} missing "
        f"of {summary['n_expected']}; split SR {_pct(summary['sr_split'])}"
    )
    for env_id in summary["tasks_without_results"]:
        tr.write_line(f"no completed episode: {env_id}", yellow=True)
    if summary["partial"]:
        tr.write_line(
            "partial run: SRs cover completed episodes only (see n_missing / errored_episodes in summary.json)",
            yellow=True,
            bold=True,
        )
    tr.write_line(f"results: {run.run_dir}")


def _tables(tr: Any, summary: dict[str, Any], per_task: list[dict[str, Any]]) -> str:
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    console = Console(file=buffer, width=max(tr._tw.fullwidth, 120), force_terminal=tr._tw.hasmarkup, highlight=False)

    tasks = Table(show_edge=False)
    for column, justify in (
        ("task", "left"),
        ("split", "left"),
        ("memory", "left"),
        ("episodes", "right"),
        ("SR", "right"),
        ("mean return", "right"),
        ("errors", "right"),
    ):
        tasks.add_column(column, justify=justify, no_wrap=True)
    for result in per_task:
        tasks.add_row(
            result["env_id"],
            result["split"],
            result["memory_type"],
            f"{result['n_episodes']}/{result['n_expected']}",
            _pct(result["sr"]),
            f"{result['mean_return']:.3f}",
            str(result["n_errors"] or ""),
        )
    console.print(tasks)

    rates = Table(show_edge=False)
    rates.add_column("success rate (mean of per-task SRs)", no_wrap=True)
    rates.add_column("SR", justify="right")
    for split, sr in summary["sr_per_split"].items():
        rates.add_row(f"split {split}", _pct(sr))
    for memory_type, sr in summary["sr_per_memory_type"].items():
        rates.add_row(f"memory {memory_type}", _pct(sr))
    console.print(rates)
    return buffer.getvalue()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
