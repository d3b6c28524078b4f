"""The canonical files (``canonical``): a split's SR is the mean of its tasks' SRs and errors are
not failures, each benchmark's groupings, per-task results in seed order. As a real session writes
them: ``tests/controller/test_plugin.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TESTS, record

from pytest_vlaeval.results.canonical import summary, task_result
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.spec import resolve_benchmark, select

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
