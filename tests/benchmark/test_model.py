"""Benchmark specs (``spec``): the built-in benchmarks' splits, task table and seed rule, a
benchmark file addressed by path, its reset options, and its axes checked against its tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vlaeval.benchmark.model import Extra, load_benchmark, resolve_benchmark, select
from pytest_vlaeval.errors import SpecError

HERE = Path(__file__).parent.parent  # tests/, which holds fake.yaml


@pytest.mark.parametrize(
    ("arg", "name", "split", "n_tasks"),
    [
        ("short", "mikasa", "short", 38),
        ("medium", "mikasa", "medium", 30),
        ("mikasa:long", "mikasa", "long", 22),
        ("all", "mikasa", "all", 90),
        ("mikasa", "mikasa", "all", 90),
    ],
)
def test_mikasa_splits_match_the_protocol(arg: str, name: str, split: str, n_tasks: int) -> None:
    benchmark, resolved = resolve_benchmark(arg)
    selection = select(benchmark, resolved)
    assert (benchmark.name, resolved, len(selection.tasks)) == (name, split, n_tasks)


def test_mikasa_table_counts_and_seed_rule() -> None:
    benchmark, _ = resolve_benchmark("mikasa")
    memory = next(axis for axis in benchmark.axes if axis.field == "memory_type")
    counts = {m: sum(t.group(memory) == m for t in benchmark.tasks) for m in benchmark.groups(memory)}
    assert counts == {
        "Spatial": 14, "Object": 18, "Capacity": 12, "Sequential": 6, "Tracking": 4, "Negative": 9,
        "Checklist": 4, "Temporal": 12, "Prospective": 5, "Procedural": 6,
    }  # fmt: skip
    assert sum(t.max_steps for t in benchmark.tasks) == 40_655
    assert all((t.split == "short") == (t.max_steps <= 200) for t in benchmark.tasks)
    selection = select(benchmark, "short")
    assert selection.seeds[:2] == (4242424242, 4242424243) and len(selection.seeds) == 50
    assert selection.is_canonical and not select(benchmark, "short", episodes=2).is_canonical
    assert sum("ycb" in t.assets for t in benchmark.tasks) == 7


def test_a_benchmark_file_path_with_a_split() -> None:
    benchmark, split = resolve_benchmark(f"{HERE / 'fake.yaml'}:long")
    assert (benchmark.name, split, [t.env_id for t in select(benchmark, split).tasks]) == ("fake", "long", ["Gamma-v0"])


def test_reset_options_come_from_the_benchmark_file() -> None:
    assert resolve_benchmark("mikasa")[0].env.reset_options == {"reconfigure": True}
    assert resolve_benchmark("libero")[0].env.reset_options == {}
    assert resolve_benchmark(str(HERE / "fake.yaml"))[0].env.reset_options == {"fresh_scene": True}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("memory_type: Object", "memory_typo: Object"),
            r"task Alpha-v0 has fields \['memory_typo'\] that are neither",
        ),
        (("summary: sr_per_memory_type}", "}"), "axis 'memory_type' needs a summary key"),
        (
            ("summary: sr_per_memory_type}", "summary: sr_per_split}"),
            r"axes\[1\]\.summary would write over the key 'sr_per_split' of summary.json, one it always has",
        ),
        (
            ("{field: split, label: split,", "{field: split, summary: sr_by_split,"),
            "the split axis's summary key is sr_per_split",
        ),
        (("{field: memory_type,", "{field: max_steps,"), "axis field 'max_steps' is a task field"),
    ],
)
def test_a_bad_axis_or_task_field_is_one_spec_error(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text((HERE / "fake.yaml").read_text().replace(*edit, 1))
    with pytest.raises(SpecError, match=message):
        resolve_benchmark(str(path))


GRID = """\
name: griddy
env: {factory: "fake_env:make_env", action_dim: 7, policy_obs_keys: [rgb]}
axes:
  - {field: base, summary: sr_per_base}
  - {field: change, summary: sr_per_change}
unavailable_splits: {b1_env: no scenes in this release}
grid: {rows: base, columns: change, row_groups: [b1, b2], column_groups: [obj, env], total: the mean of the cells}
tasks:
  - {env_id: B1-obj, split: b1_obj, base: b1, change: obj, max_steps: 4}
  - {env_id: B2-obj, split: b2_obj, base: b2, change: obj, max_steps: 4}
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # W5: a task the grid's total would leave out
        (("base: b2", "base: b3"), "task B2-obj's base 'b3' is not in grid.row_groups, so the grid's total would"),
        (("base: b2", "base: B2"), "task B2-obj's base 'B2' is not in grid.row_groups (it differs by case from 'b2')"),
        (("column_groups: [obj, env]", "column_groups: [env]"), "task B1-obj's change 'obj' is not in grid.column"),
        (("row_groups: [b1, b2]", "row_groups: [b1, b2, b1]"), "grid.row_groups lists 'b1' more than once"),
        (("columns: change", "columns: base"), "grid rows and columns are both 'base'; name two axes"),
        # W5: selectors that would name two things
        (("b1_env:", "ALL:"), "a split may not be called 'all', the selector of every task"),
        (("split: b1_obj", "split: all"), "a split may not be called 'all'"),
        (("b1_env:", "B2:"), "unavailable split 'B2' is named like a group along the axis 'base', so 'B2' could not"),
        (("b1_env:", "obj:"), "unavailable split 'obj' is named like a group along the axis 'change'"),
        (("split: b2_obj", "split: Obj"), "split 'obj' is named like a group along the axis 'change', so 'obj' could"),
        # D12: a few KB of group names that would make millions of cells
        (
            (
                "row_groups: [b1, b2], column_groups: [obj, env]",
                f"row_groups: [b1, b2, {', '.join(f'r{i}' for i in range(3000))}], "
                f"column_groups: [obj, env, {', '.join(f'c{i}' for i in range(2999))}]",
            ),
            "the grid declares 9,009,002 cells (3,002 x 3,001), more than 10,000",
        ),
    ],
)
def test_a_grid_or_split_that_would_lose_or_hide_tasks_is_one_spec_error(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    path = tmp_path / "griddy.yaml"
    assert edit[0] in GRID
    path.write_text(GRID.replace(*edit, 1))
    with pytest.raises(SpecError) as caught:
        load_benchmark(path)
    assert message in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("reduce", "values", "expected"),
    [
        ("mean", [1e308, 1e308], 1e308),  # their plain sum is infinity
        ("mean", [1.7e308, 1.7e308, 1.7e308], 1.7e308),
        ("mean", [0.5, 0.25], 0.375),
        ("sum", [1e308, 1e308], None),  # no float holds it, and JSON has no infinity
        ("sum", [1e308, -1e308], 0.0),
        ("mean", [], None),
    ],
)
def test_an_extra_reduces_to_a_finite_number_or_none(reduce: str, values: list[float], expected: float | None) -> None:
    assert Extra("bar", reduce, "bar_summary").reduced(values) == expected
