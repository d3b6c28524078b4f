"""``report.md`` (also the CI step summary) shows every name from data as text: whatever a received
run or benchmark file names a group, an axis, a grid's total or a policy, no tag, image, link,
emphasis, heading, table cell or row comes of it."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import TESTS, record
from hypothesis import given
from hypothesis import strategies as st

from pytest_vlaeval.benchmark.model import resolve_benchmark, select
from pytest_vlaeval.printable import UNSAFE
from pytest_vlaeval.report.markdown import markdown_report, markdown_text
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir

HOSTILE = (
    "<img src=x onerror=alert(1)> ![pixel](http://e/p.png) [link](http://e) | **PASS** _x_ `c` ~s~\n# Heading\x1b[2J"
)


def literal(markdown: str) -> str:
    """What is left of markdown text once its backslash escapes are taken out."""
    return re.sub(r"\\.", "", markdown)


@given(st.text())
def test_any_text_is_literal_markdown_on_one_line(text: str) -> None:
    shown = markdown_text(text)
    assert not UNSAFE.search(shown), "no line break, no control character"
    assert not re.search(r"[<>\\`*_\[\]|~]", literal(shown)) and not shown.startswith("#")


def test_received_names_in_report_md_are_text(tmp_path: Path) -> None:
    benchmark, _ = resolve_benchmark(str(TESTS / "fake.yaml"))
    latest = LatestRecords(RunDir(tmp_path))
    for task in ("Alpha-v0", "Beta-v0"):
        latest.add(record(task, 100, "success"))
    body, per_task = summary(select(benchmark, "short", episodes=1), latest, interrupted=False)
    body["axes"][1]["label"] = HOSTILE
    for key in ("sr_per_memory_type", "sr_per_memory_type_ci95"):
        body[key][HOSTILE] = body[key].pop("Object")  # type: ignore[literal-required]
    per_task[0]["memory_type"] = HOSTILE  # type: ignore[typeddict-unknown-key]
    body["grid"] = {
        "rows": "split",
        "columns": "memory_type",
        "cells": {HOSTILE: {HOSTILE: 1.0, "Spatial": 1.0}},
        "total": 1.0,
        "total_ci95": [0.2, 1.0],
        "total_definition": HOSTILE,
        "missing_cells": [],
        "complete": True,
        "unavailable_splits": {},
    }
    report = markdown_report(body, per_task, None, policy=HOSTILE)

    assert "<img" not in report and "**PASS**" not in report and not UNSAFE.search(report.replace("\n", ""))
    assert not re.search(r"(?<!\\)\]\(", report), "no link or image"
    assert [line for line in report.splitlines() if line.startswith("#")] == [report.splitlines()[0]]
    tables = [line for line in report.splitlines() if line.startswith("|")]
    pipes = sorted(literal(line).count("|") for line in tables)
    assert pipes == [4] * 8 + [8] * 4, "every name stays in its cell: the grid's and groups' 3 cells, the tasks' 7"
