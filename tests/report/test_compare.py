"""vlaeval compare on real sessions of the fake benchmark: three checkpoints, the paired
differences the gate computes, the files it writes, and one line for runs that cannot be compared;
on canonical files written here, received runs whose files disagree with one another, and names
that hold terminal control sequences or markup."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import TESTS, checkpoint_runs, read_page, record

import pytest_vlaeval
from pytest_vlaeval.benchmark.model import load_benchmark, resolve_benchmark, select
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.fixed import FixedGate, paired_interval
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.printable import UNSAFE
from pytest_vlaeval.report.comparison import GROUP, OVERALL, TASK, ComparisonError, load_run
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir


def test_three_checkpoints_side_by_side_with_the_gates_paired_differences(fake: pytest.Pytester) -> None:
    early, middle, late = checkpoint_runs(fake, "Early", "Middle", "Late")
    comparison = pytest_vlaeval.compare(early, middle, late)

    assert [run.path for run in comparison.runs] == [early, middle, late]
    overall = comparison.row(OVERALL, "short")
    assert [e.sr if e else None for e in overall.estimates] == [0.0, pytest.approx(2 / 3), 1.0]
    for path, difference in zip((middle, late), overall.differences, strict=True):
        per_task = load_run(path)[1]
        seeds = sorted({s for r in per_task for s in r["episode_seeds"]})
        baseline = load_baseline(
            early, [r["env_id"] for r in per_task], seeds, benchmark=load_benchmark(early / "benchmark.yaml")
        )
        gate = FixedGate.create(baseline, seeds, GateSettings(max_drop=1.0)).judge(per_task)
        assert gate.drop is not None and difference is not None
        assert difference.difference == pytest.approx(-gate.drop)
        low, high = paired_interval(list(gate.drops.values()), gate.gate.method, 0.05)
        assert difference.interval == pytest.approx((-high, -low))
        assert (difference.seeds, difference.method) == (3, gate.gate.method.name)
    assert {(r.axis, r.name) for r in comparison.rows} == {
        (OVERALL, "short"),
        ("split", "Short"),
        ("memory type", "Object"),
        ("memory type", "Spatial"),
        ("task", "Alpha-v0"),
        ("task", "Beta-v0"),
    }
    assert comparison.row(TASK, "Alpha-v0").estimates[1].sr == pytest.approx(2 / 3)


def test_the_command_prints_the_table_and_writes_markdown_and_html(fake: pytest.Pytester, tmp_path: Path) -> None:
    runs = checkpoint_runs(fake, "Early", "Middle", "Late")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "compare", *map(str, runs), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = (out / "compare.md").read_text(encoding="utf-8")
    assert table in done.stdout
    assert "| overall short | 0.0% [0-86%] | 66.7% [6-98%] | 100.0% [14-100%] | +66.7 [" in table
    page = read_page(out / "compare.html")
    assert len(page.rows["comparison"]) == 6
    assert "curves" in page.ids
    html = (out / "compare.html").read_text(encoding="utf-8")
    assert html.count('<g class="curve"') == 4  # overall, one split, two memory types


def test_runs_of_different_protocols_are_refused_with_one_line(fake: pytest.Pytester, tmp_path: Path) -> None:
    (first,) = checkpoint_runs(fake, "Early")
    (other,) = checkpoint_runs(fake, "Late", extra=("--episodes=2",))
    with pytest.raises(ComparisonError, match="different benchmark or protocol"):
        pytest_vlaeval.compare(first, other)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "compare", str(first), str(other), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "n_episodes_per_task 2 vs 3" in done.stderr
    assert not (tmp_path / "compare.md").exists()


def test_a_folder_that_is_no_run_is_refused_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(ComparisonError, match="not a run directory"):
        pytest_vlaeval.compare(tmp_path)


ALPHA_ONLY = """
import numpy as np


class AlphaOnly:
    chunk_size = 1

    def reset(self, episode):
        self.reach = 1.0 if episode.task == "Alpha-v0" else 0.0  # every seed of Alpha-v0, none of another

    def act(self, obs):
        return np.full(7, self.reach, dtype=np.float32)
"""


def test_the_overall_and_group_rows_compare_only_the_tasks_every_run_has(fake: pytest.Pytester, tmp_path: Path) -> None:
    """One policy over Alpha-v0 and Beta-v0, then over Alpha-v0 alone: side by side, their overall
    rows were 50% (two tasks) and 100% (one task), a difference that is only the missing task."""
    fake.makepyfile(alpha_only=ALPHA_ONLY)
    runs = {"both": [], "alpha": ["--vla-tasks=Alpha-v0"]}
    for name, extra in runs.items():
        fake.runpytest("--benchmark=fake.yaml:short", "--policy=alpha_only:AlphaOnly", f"--vla-run-name={name}", *extra)
    both, alpha = (fake.path / "results" / name for name in runs)
    assert (load_run(both)[0]["sr_split"], load_run(alpha)[0]["sr_split"]) == (0.5, 1.0)

    comparison = pytest_vlaeval.compare(both, alpha)
    overall = comparison.row(OVERALL, "short")
    assert [e.sr if e else None for e in overall.estimates] == [1.0, 1.0]
    assert overall.estimates[0] == comparison.row(TASK, "Alpha-v0").estimates[0], "the mean over Alpha-v0 alone"
    assert overall.differences[0] is not None and overall.differences[0].difference == 0.0
    assert [(r.axis, r.name) for r in comparison.rows if r.kind == GROUP] == [
        ("split", "Short"),
        ("memory type", "Object"),
    ], "Spatial's only task, Beta-v0, is not in both runs"
    assert [e.sr if e else None for e in comparison.row(GROUP, "Short", "split").estimates] == [1.0, 1.0]
    assert [e.sr if e else None for e in comparison.row(TASK, "Beta-v0").estimates] == [0.0, None]
    note = (
        "The overall and group rows are over the tasks all 2 runs have results for (1 of 2): they leave out "
        "Beta-v0, shown in the task rows."
    )
    assert comparison.note == note
    assert pytest_vlaeval.compare(both, both).note is None, "no note where every run has the same tasks"

    done = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "compare", str(both), str(alpha), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert note in done.stdout.splitlines() and "| overall short | 100.0% [" in done.stdout
    assert note in (tmp_path / "compare.md").read_text().splitlines()
    assert "shared-tasks" in read_page(tmp_path / "compare.html").ids
    assert note in (tmp_path / "compare.html").read_text()


def test_runs_that_share_no_task_are_refused_with_one_line(tmp_path: Path) -> None:
    first, second = canonical_run(tmp_path / "first"), canonical_run(tmp_path / "second")
    edit(first / "summary.json", lambda d: d.update(tasks=["Alpha-v0"]))
    edit(second / "summary.json", lambda d: d.update(tasks=["Beta-v0"]))
    with pytest.raises(ComparisonError, match=f"refusing to compare {first}, {second}: no task has results in every"):
        pytest_vlaeval.compare(first, second)


# -- received runs: files that disagree with one another, names that are not plain text ------------


def canonical_run(directory: Path) -> Path:
    """The canonical files of a run of the fake benchmark's short split, written here (no session):
    each task succeeded on seed 100 and failed on 101."""
    benchmark, _ = resolve_benchmark(str(TESTS / "fake.yaml"))
    latest = LatestRecords(RunDir(directory))
    for task in ("Alpha-v0", "Beta-v0"):
        latest.add(record(task, 100, "success"))
        latest.add(record(task, 101, "failure"))
    body, per_task = summary(select(benchmark, "short", episodes=2), latest, interrupted=False)
    directory.mkdir()
    (directory / "summary.json").write_text(json.dumps(body))
    for result in per_task:
        RunDir(directory).task(result["env_id"]).write_text(json.dumps(result))
    return directory


def edit(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


INCONSISTENT = {
    "a one-value task interval": (
        "Alpha-v0.json",
        lambda d: d.update(sr_ci95=[0.1]),
        "Alpha-v0.json: sr_ci95 holds 1 values",
    ),
    "an empty split interval": ("summary.json", lambda d: d.update(sr_split_ci95=[]), "sr_split_ci95 holds 0 values"),
    "seeds and successes of different lengths": (
        "Alpha-v0.json",
        lambda d: d.update(successes=[True]),
        "Alpha-v0.json: episode_seeds holds 2 seeds but successes 1 outcomes",
    ),
    "a group without its interval": (
        "summary.json",
        lambda d: d["sr_per_memory_type_ci95"].pop("Object"),
        "summary.json: sr_per_memory_type_ci95 has no interval for the memory type group 'Object'",
    ),
    "a task without its axis field": (
        "Alpha-v0.json",
        lambda d: d.pop("memory_type"),
        "Alpha-v0.json: memory_type (the task's memory type group) is missing",
    ),
    "a task file of another env": (
        "Alpha-v0.json",
        lambda d: d.update(env_id="Beta-v0"),
        "Alpha-v0.json: env_id is 'Beta-v0', not the 'Alpha-v0' its name says",
    ),
    "a task listed twice": (
        "summary.json",
        lambda d: d["tasks"].append("Alpha-v0"),
        "summary.json: tasks names a task twice",
    ),
    "a task's group without its SR": (
        "summary.json",
        lambda d: (d["sr_per_memory_type"].pop("Object"), d["sr_per_memory_type_ci95"].pop("Object")),
        "summary.json: sr_per_memory_type has no SR for 'Object', the memory type group of Alpha-v0",
    ),
    "results without a split SR": (
        "summary.json",
        lambda d: d.update(sr_split=None),
        "summary.json: sr_split or sr_split_ci95 is null, yet 2 tasks have results",
    ),
    "no interval method": (
        "summary.json",
        lambda d: d["ci95_methods"].pop("sr_split_ci95"),
        "summary.json: ci95_methods has no sr_split_ci95",
    ),
    "a split SR above 1": (
        "summary.json",
        lambda d: d.update(sr_split=7.5),
        "summary.json: sr_split holds 7.5, outside [0, 1] where a success rate lies",
    ),
    "a split interval below 0": (
        "summary.json",
        lambda d: d.update(sr_split_ci95=[-0.5, 0.9]),
        "summary.json: sr_split_ci95 holds -0.5, outside [0, 1]",
    ),
    "a group SR below 0": (
        "summary.json",
        lambda d: d["sr_per_memory_type"].update(Object=-3.0),
        "summary.json: sr_per_memory_type['Object'] holds -3.0, outside [0, 1]",
    ),
    "a group interval above 1": (
        "summary.json",
        lambda d: d["sr_per_memory_type_ci95"].update(Object=[0.1, 2.0]),
        "summary.json: sr_per_memory_type_ci95['Object'] holds 2.0, outside [0, 1]",
    ),
    "a task SR below 0": (
        "Alpha-v0.json",
        lambda d: d.update(sr=-3.0),
        "Alpha-v0.json: sr holds -3.0, outside [0, 1] where a success rate lies",
    ),
    "a task interval above 1": (
        "Alpha-v0.json",
        lambda d: d.update(sr_ci95=[0.1, 1.5]),
        "Alpha-v0.json: sr_ci95 holds 1.5, outside [0, 1]",
    ),
    "other axes than the first run's": (
        "summary.json",
        lambda d: d.update(axes=d["axes"][:1]),
        "their summaries group by other axes",
    ),
}


@pytest.mark.parametrize("case", INCONSISTENT)
def test_a_run_whose_files_disagree_is_refused_in_one_line_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Each file is type-valid; together they are not a run this package writes (each crashed the
    rendering: an IndexError, zip()'s ValueError, a KeyError, too many values to unpack)."""
    first, second = canonical_run(tmp_path / "first"), canonical_run(tmp_path / "second")
    name, change, expected = INCONSISTENT[case]
    edit(second / name, change)
    with pytest.raises(ComparisonError, match=re.escape(expected)):
        pytest_vlaeval.compare(first, second)
    assert vlaeval(["compare", str(first), str(second), "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "compare.md").exists()


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[32mPASS: all good\x1b[0m\u202e<img src=x onerror=alert(1)>|**PASS**"
"""Set the title, clear the screen, print a green verdict; reverse what follows; an image, a cell, emphasis."""


def test_received_names_reach_the_terminal_and_compare_md_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = canonical_run(tmp_path / "first"), canonical_run(tmp_path / "second")
    for run in (first, second):
        edit(run / "Alpha-v0.json", lambda d: d.update(memory_type=HOSTILE))

        def rename(d: dict[str, Any]) -> None:
            d["model"] = {"name": HOSTILE}
            for key in ("sr_per_memory_type", "sr_per_memory_type_ci95"):
                d[key][HOSTILE] = d[key].pop("Object")

        edit(run / "summary.json", rename)
    assert vlaeval(["compare", str(first), str(second), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    markdown = (tmp_path / "compare.md").read_text()
    for text in (printed, markdown):
        assert not UNSAFE.search(text.replace("\n", "")), "no control character reaches the terminal or the file"
        assert "\\\\x1b\\]0;owned" in text and "\\\\u202e" in text, "shown as escapes (in markdown: escaped again)"
        assert "<img" not in text and "**PASS**" not in text
    row = next(line for line in markdown.splitlines() if line.startswith("| memory type "))
    assert row.replace("\\|", "").count("|") == 5, "the group's name stays in its cell: one row, 4 cells"


@pytest.mark.parametrize("label", ["overall", "task", "split"])
def test_a_group_row_is_matched_by_its_axis_field_whatever_the_axis_is_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    """A label is only what a row is shown as: an axis labelled like the overall row, the task rows
    or another axis still shows its own groups' SRs (matched by label, its rows took the split's
    SR, a task's, or failed)."""
    runs = [canonical_run(tmp_path / name) for name in ("first", "second")]

    def relabel(d: dict[str, Any]) -> None:
        d["axes"][1]["label"] = label
        d["sr_per_memory_type"]["Object"] = 0.25  # the split's SR and Alpha-v0's are 0.5

    for run in runs:
        edit(run / "summary.json", relabel)
    comparison = pytest_vlaeval.compare(*runs)
    row = comparison.row(GROUP, "Object", "memory_type")
    assert row.axis == label and [e.sr for e in row.estimates if e] == [0.25, 0.25]
    assert row in comparison.curves
    assert vlaeval(["compare", *map(str, runs), "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert f"| {label} Object | 25.0% [" in (tmp_path / "compare.md").read_text()
