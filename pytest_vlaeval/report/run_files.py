"""A run's derived files, written in one place from its latest records (as pytest's junitxml
collects reports, then writes once per occasion): the controller calls it as a session goes and
ends, ``vlaeval merge`` once.

The canonical JSON says what the run is, so a refused write of it is reported apart (it decides
the exit status); the pages and the chart are readings of it, so a refused one is a line to show.
They are written only after the summary they read, and removed when it could not be written: a
page must never show a verdict the run's files do not hold.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vlaeval.errors import ResultsUnwritable
from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.verdict import Verdict
from pytest_vlaeval.report.chart import write_chart
from pytest_vlaeval.report.html import write_report
from pytest_vlaeval.report.markdown import markdown_report
from pytest_vlaeval.results.canonical import write_canonical, write_summary
from pytest_vlaeval.results.rundir import RunDir, attempt_write
from pytest_vlaeval.results.store import write_json_atomic, write_text_atomic
from pytest_vlaeval.schema import RunSummary, TaskResult


@dataclass
class Written:
    """What one write left on disk."""

    canonical_refused: str | None = None
    """Why the canonical JSON could not be written (a full disk), None when it was."""
    refused: list[str] = field(default_factory=list)
    """A line for each page or chart the disk refused."""
    chart: Path | None = None


def write_run_files(
    run_dir: RunDir,
    summary: RunSummary,
    per_task: list[TaskResult],
    *,
    policy: str,
    eval_info: dict[str, Any],
    verdict: Verdict | None = None,
    baseline: Baseline | None = None,
    final: bool,
) -> Written:
    """``summary.json``, ``eval_info.json`` (LeRobot's view of the same records: ``lerobot.eval_info``)
    and ``report.html`` (the episodes that flipped against ``baseline``); when
    ``final`` (a session's end, a merge) also every task's ``<ENV_ID>.json`` (as a session goes,
    each is written as its task finishes), ``report.md``, the chart and the GitHub step summary.
    When the canonical JSON is refused, none of these is written and the run's are removed."""
    written = Written()
    if verdict is not None:
        summary["gate"] = verdict.as_dict()
    try:
        if final:
            write_canonical(run_dir, summary, per_task)
        else:  # each task's own file was written as it finished
            write_summary(run_dir, summary)
    except ResultsUnwritable as exc:
        written.canonical_refused = str(exc)
        for derived in (run_dir.eval_info, run_dir.report_html, run_dir.chart, run_dir.report):
            with suppress(OSError):  # the refusal above is what is reported
                derived.unlink(missing_ok=True)
        return written
    attempt_write(run_dir.eval_info, lambda: write_json_atomic(run_dir.eval_info, eval_info), written.refused)
    attempt_write(
        run_dir.report_html, lambda: write_report(run_dir, summary, per_task, policy, baseline), written.refused
    )
    if final:
        written.chart = attempt_write(
            run_dir.chart, lambda: write_chart(summary, per_task, run_dir.chart), written.refused
        )
        markdown = markdown_report(summary, per_task, verdict, policy)
        attempt_write(run_dir.report, lambda: write_text_atomic(run_dir.report, markdown), written.refused)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            attempt_write(
                Path(step_summary), lambda: _append(Path(step_summary), markdown + "\n"), written.refused, ours=False
            )
    return written


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
