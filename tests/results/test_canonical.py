"""The canonical files (``canonical``): a split's SR is the mean of its tasks' SRs and errors are
not failures, each benchmark's groupings, per-task results in seed order. As a real session writes
them: ``tests/controller/test_plugin.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TESTS, record

from pytest_vlaeval.benchmark import file as benchmark_file
from pytest_vlaeval.benchmark.model import builtin_benchmarks, load_benchmark, resolve_benchmark, select
from pytest_vlaeval.results.canonical import summary, task_result
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir

HERE = TESTS


def test_split_sr_is_the_mean_of_task_srs_and_errors_are_not_failures(tmp_path: Path) -> None:
    benchmark, _ = resolve_benchmark(str(HERE / "fake.yaml"))
    selection = select(benchmark, "short", episodes=4)
    latest = LatestRecords(RunDir(tmp_path))
    for record_ in [
        record("Alpha-v0", 100, "success"),
        record("Alpha-v0", 101, "failure"),
        record("Alpha-v0", 102, "failure"),
        record("Alpha-v0", 103, "error"),
        record("Beta-v0", 100, "success"),
    ]:
        latest.add(record_)
    body, per_task = summary(selection, latest, interrupted=False)
    alpha = next(r for r in per_task if r["env_id"] == "Alpha-v0")
    assert alpha["sr"] == pytest.approx(1 / 3) and alpha["n_episodes"] == 3 and alpha["n_errors"] == 1
    assert body["sr_split"] == pytest.approx((1 / 3 + 1.0) / 2)  # pooled would be 2/4
    assert (body["n_completed"], body["n_errors"], body["n_missing"], body["partial"]) == (4, 1, 3, True)
    assert body["errored_episodes"] == [{"task": "Alpha-v0", "seed": 103, "message": ""}]


def test_libero_groups_by_its_suite_only_and_mikasa_keeps_the_reference_keys(tmp_path: Path) -> None:
    """LIBERO's summary has its suites under sr_per_split and no memory type; MIKASA's has both
    of the reference runner's groupings, and each task's memory type."""
    keys = {}
    for name, env_id in (
        ("libero", "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate"),
        ("mikasa", "RememberColor3-VLA-v0"),
    ):
        benchmark, _ = resolve_benchmark(name)
        selection = select(benchmark, "all", env_ids=[env_id], episodes=1)
        latest = LatestRecords(RunDir(tmp_path / name))
        latest.add(record(env_id, benchmark.start_seed, "success"))
        body, (result,) = summary(selection, latest, interrupted=False)
        keys[name] = {k for k in body if k.startswith("sr_per_")}, result
    libero_keys, libero_task = keys["libero"]
    assert libero_keys == {"sr_per_split", "sr_per_split_ci95"} and "memory_type" not in libero_task
    assert libero_task["split"] == "90"
    mikasa_keys, mikasa_task = keys["mikasa"]
    assert mikasa_keys == {"sr_per_split", "sr_per_split_ci95", "sr_per_memory_type", "sr_per_memory_type_ci95"}
    assert (mikasa_task["split"], mikasa_task["memory_type"]) == ("Short", "Object")


def test_task_result_orders_episodes_by_seed() -> None:
    benchmark, _ = resolve_benchmark(str(HERE / "fake.yaml"))
    selection = select(benchmark, "short", episodes=2)
    result = task_result(
        benchmark.task("Beta-v0"), [record("Beta-v0", 101, "success"), record("Beta-v0", 100, "failure")], selection
    )
    assert result["episode_seeds"] == [100, 101] and result["successes"] == [False, True] and result["complete"]


@pytest.mark.parametrize("path", [*sorted(builtin_benchmarks().values()), TESTS / "fake.yaml"], ids=lambda p: p.stem)
def test_the_canonical_files_have_exactly_the_keys_the_benchmark_file_names(tmp_path: Path, path: Path) -> None:
    """One list of the keys a benchmark file names (``benchmark_file.keys_made``) is both what load
    checks for clashes and what the writer makes: every key beyond the files' fixed ones is on it."""
    benchmark = load_benchmark(path)
    document, *_ = benchmark_file.parse(benchmark_file.read_yaml(path), path)
    task = benchmark.tasks[0]
    latest = LatestRecords(RunDir(tmp_path))
    latest.add(record(task.env_id, benchmark.start_seed, "success"))
    body, (result,) = summary(select(benchmark, "all", env_ids=[task.env_id], episodes=1), latest, interrupted=False)
    made = {file: {key for _, key in keys} for file, keys in benchmark_file.keys_made(document).items()}
    assert set(body) - benchmark_file.FIXED_KEYS["summary.json"] == made["summary.json"]
    assert set(result) - benchmark_file.FIXED_KEYS["<ENV_ID>.json"] == made["<ENV_ID>.json"]


def test_a_grid_over_a_title_cased_axis_names_its_groups_as_the_files_write_them(tmp_path: Path) -> None:
    """The split's groups are written title-cased (``Short``); the grid's declared ``short`` is that
    group, so its cells get their tasks' SRs instead of all staying empty."""
    path = tmp_path / "grid.yaml"
    path.write_text(
        'name: grid\nenv: {factory: "fake_env:make_env", action_dim: 7, policy_obs_keys: [rgb]}\n'
        "axes:\n  - {field: split, title_case: true}\n  - {field: change, summary: sr_per_change}\n"
        "grid: {rows: split, columns: change, row_groups: [short, long], column_groups: [obj], total: the mean}\n"
        "tasks:\n  - {env_id: A-v0, split: short, change: obj, max_steps: 4}\n"
        "  - {env_id: B-v0, split: long, change: obj, max_steps: 4}\n"
    )
    benchmark = load_benchmark(path)
    latest = LatestRecords(RunDir(tmp_path))
    latest.add(record("A-v0", 0, "success"))
    latest.add(record("B-v0", 0, "failure"))
    grid = summary(select(benchmark, "all"), latest, interrupted=False)[0]["grid"]
    assert grid["cells"] == {"Short": {"obj": 1.0}, "Long": {"obj": 0.0}}
    assert grid["complete"] and grid["total"] == 0.5 and grid["missing_cells"] == []
