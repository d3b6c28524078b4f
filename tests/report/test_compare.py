"""vlaeval compare on real sessions of the fake benchmark: three checkpoints, the paired
differences the gate computes, the files it writes, and one line for runs that cannot be compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import checkpoint_runs, read_page

import pytest_vlaeval
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.fixed import FixedGate, paired_interval
from pytest_vlaeval.report.comparison import OVERALL, ComparisonError, load_run


def test_three_checkpoints_side_by_side_with_the_gates_paired_differences(fake: pytest.Pytester) -> None:
    early, middle, late = checkpoint_runs(fake, "Early", "Middle", "Late")
    comparison = pytest_vlaeval.compare(early, middle, late)

    assert [run.path for run in comparison.runs] == [early, middle, late]
    overall = comparison.row(OVERALL, "short")
    assert [e.sr if e else None for e in overall.estimates] == [0.0, pytest.approx(2 / 3), 1.0]
    for path, difference in zip((middle, late), overall.differences, strict=True):
        per_task = load_run(path)[1]
        seeds = sorted({s for r in per_task for s in r["episode_seeds"]})
        baseline = load_baseline(early, [r["env_id"] for r in per_task], seeds)
        gate = FixedGate.create(baseline, seeds, max_drop=1.0, alpha=0.05).judge(per_task)
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
    assert comparison.row("task", "Alpha-v0").estimates[1].sr == pytest.approx(2 / 3)


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
