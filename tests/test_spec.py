"""Benchmark specs (``spec``): the built-in benchmarks' splits, task table and seed rule, a
benchmark file addressed by path, its reset options, and its axes checked against its tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.spec import resolve_benchmark, select

HERE = Path(__file__).parent


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
            "axis summary key 'sr_per_split' is a key of summary.json",
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
