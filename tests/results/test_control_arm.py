"""A benchmark's control arm (a file's ``controls``, LIBERO-Plus's unperturbed LIBERO tasks) and its
interval clusters (``interval_clusters``): which tasks a selection holds, the paired difference of
every group against the controls of its tasks in ``summary.json``, intervals with a task group as
the independent unit, ``eval_info.json`` without the controls, and the report's axes chart. On a
toy benchmark over the fake env; the real one: ``tests/envs/test_libero_plus.py``."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import yaml
from helpers import read_json, read_page, record, run_dir

from pytest_vlaeval.benchmark.model import load_benchmark, select
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.stats import clustered_difference_interval, clustered_sr_interval, seed_clustered_interval
from pytest_vlaeval.lerobot.eval_info import eval_info
from pytest_vlaeval.report.html import render_report
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir

TOY = {
    "name": "toy-plus",
    "env": {
        "factory": "fake_env:make_env",
        "action_dim": 7,
        "policy_obs_keys": ["rgb", "proprio"],
        "reset_options": {"fresh_scene": True},
    },
    "protocol": {"start_seed": 100, "episodes": 2},
    "axes": [
        {"field": "dimension", "label": "perturbation", "summary": "sr_per_dimension"},
        {"field": "base", "label": "base task", "summary": "sr_per_base"},
    ],
    "controls": {"field": "dimension", "group": "none", "pair_by": "base"},
    "interval_clusters": "base",
    "tasks": [
        {"env_id": f"{name}", "split": "s", "dimension": dimension, "base": base, "max_steps": 3}
        for name, dimension, base in [
            ("A-v0", "none", "A-v0"),
            ("B-v0", "none", "B-v0"),
            ("A-cam-v0", "camera", "A-v0"),
            ("A-noise-v0", "noise", "A-v0"),
            ("B-cam-v0", "camera", "B-v0"),
            ("B-noise-v0", "noise", "B-v0"),
        ]
    ],
}
CONTROLS = ["A-v0", "B-v0"]


def toy(folder: Path, **changes: object) -> Path:
    path = folder / "robust.yaml"
    path.write_text(yaml.safe_dump({**TOY, **changes}, sort_keys=False))
    return path


def test_controls_are_selected_by_their_group_or_beside_the_tasks_they_control(tmp_path: Path) -> None:
    benchmark = load_benchmark(toy(tmp_path))
    assert [t.env_id for t in benchmark.selected("all")] == ["A-cam-v0", "A-noise-v0", "B-cam-v0", "B-noise-v0"]
    assert [t.env_id for t in benchmark.selected("s")] == ["A-cam-v0", "A-noise-v0", "B-cam-v0", "B-noise-v0"]
    assert [t.env_id for t in benchmark.selected("none")] == CONTROLS
    armed = select(benchmark, "camera", control_arm=True)
    assert [t.env_id for t in armed.tasks] == ["A-cam-v0", "B-cam-v0", *CONTROLS]
    only_b = select(benchmark, "all", env_ids=["B-noise-v0"], control_arm=True)
    assert [t.env_id for t in only_b.tasks] == ["B-noise-v0", "B-v0"]
    # A run made with its controls names them among its tasks; they are found by their id.
    assert [t.env_id for t in select(benchmark, "all", env_ids=["A-cam-v0", "A-v0"]).tasks] == ["A-cam-v0", "A-v0"]
    (tmp_path / "plain").mkdir()
    plain = load_benchmark(toy(tmp_path / "plain", controls=None, interval_clusters=None))
    with pytest.raises(SpecError, match=r"^--vla-control-arm: benchmark 'toy-plus' declares no control tasks"):
        select(plain, "all", control_arm=True)


@pytest.mark.parametrize(
    ("base", "why"),
    [("C-v0", "is not a control task's env id"), ("A-cam-v0", "is not a control task's env id")],
)
def test_a_task_whose_control_is_no_control_task_is_refused_in_one_line(tmp_path: Path, base: str, why: str) -> None:
    tasks = [dict(t) for t in TOY["tasks"]]  # type: ignore[union-attr]
    tasks[3]["base"] = base
    with pytest.raises(SpecError, match=f"task A-noise-v0's base '{base}' {why} \\(controls.pair_by\\)$"):
        load_benchmark(toy(tmp_path, tasks=tasks))
    with pytest.raises(SpecError, match="interval_clusters 'seed' is not one of the axes"):
        load_benchmark(toy(tmp_path, interval_clusters="seed"))


def toy_records(latest: LatestRecords, selection_tasks: list[str]) -> None:
    """Controls succeed on both seeds; camera variants fail on seed 100 only; noise variants on both,
    but B-noise-v0, which succeeds on seed 101."""
    outcomes = {
        "A-v0": ("success", "success"),
        "B-v0": ("success", "success"),
        "A-cam-v0": ("failure", "success"),
        "B-cam-v0": ("failure", "success"),
        "A-noise-v0": ("failure", "failure"),
        "B-noise-v0": ("failure", "success"),
    }
    for env_id in selection_tasks:
        for seed, outcome in zip((100, 101), outcomes[env_id], strict=True):
            latest.add(record(env_id, seed, outcome))


def test_the_control_arm_pairs_every_group_and_stays_out_of_the_runs_own_numbers(tmp_path: Path) -> None:
    benchmark = load_benchmark(toy(tmp_path))
    selection = select(benchmark, "all", control_arm=True)
    latest = LatestRecords(RunDir(tmp_path / "run"))
    toy_records(latest, [t.env_id for t in selection.tasks])
    body, per_task = summary(selection, latest, interrupted=False)
    assert body["sr_split"] == pytest.approx((0.5 + 0.5 + 0.0 + 0.5) / 4)  # the controls in no SR
    assert body["sr_pooled"] == pytest.approx(3 / 8) and body["n_completed"] == 12 and not body["partial"]
    assert body["sr_per_dimension"] == {"camera": 0.5, "noise": 0.25}
    assert {r["env_id"] for r in per_task} >= set(CONTROLS)  # each control has its own task file
    arm = body["control_arm"]
    assert (arm["tasks"], arm["sr"], arm["field"], arm["group"], arm["pair_by"]) == (
        CONTROLS,
        1.0,
        "dimension",
        "none",
        "base",
    )
    camera, noise = arm["paired"]["dimension"]["camera"], arm["paired"]["dimension"]["noise"]
    assert (camera["n_tasks"], camera["sr"], camera["control_sr"], camera["difference"]) == (2, 0.5, 1.0, -0.5)
    assert camera["difference_ci95"] == [-0.5, -0.5]  # both bases alike: no spread between the clusters
    # Two clusters (A: -1.0, B: -0.5): t(0.975, 1) = 12.7 x the cluster-robust error 0.25 spans the range.
    assert noise["difference"] == pytest.approx(-0.75) and noise["difference_ci95"] == [-1.0, 1.0]
    assert set(arm["paired"]) == {"split", "dimension"}  # not along the pairing axis itself
    assert body["interval_clusters"] == "base" and "base task as clusters" in body["ci95_methods"]["sr_split_ci95"]


def test_without_its_controls_a_run_has_no_control_arm(tmp_path: Path) -> None:
    benchmark = load_benchmark(toy(tmp_path))
    selection = select(benchmark, "all")
    latest = LatestRecords(RunDir(tmp_path / "run"))
    toy_records(latest, [t.env_id for t in selection.tasks])
    body, _ = summary(selection, latest, interrupted=False)
    assert "control_arm" not in body and body["sr_split"] == pytest.approx(0.375)


def test_group_intervals_take_the_base_task_as_the_unit(tmp_path: Path) -> None:
    """With one seed a task (LIBERO-Plus's protocol) seeds as clusters leave no interval; base tasks do."""
    benchmark = load_benchmark(toy(tmp_path, protocol={"start_seed": 100, "episodes": 1}))
    selection = select(benchmark, "all")
    latest = LatestRecords(RunDir(tmp_path / "run"))
    for env_id, outcome in [("A-cam-v0", "success"), ("A-noise-v0", "success"), ("B-cam-v0", "failure")]:
        latest.add(record(env_id, 100, outcome))
    latest.add(record("B-noise-v0", 100, "failure"))
    body, per_task = summary(selection, latest, interrupted=False)
    by_seed = list(seed_clustered_interval([{100: r["successes"][0]} for r in per_task]))
    by_base = list(clustered_sr_interval([(r["base"], {100: float(r["successes"][0])}) for r in per_task]))
    assert by_seed == [0.0, 1.0] and body["sr_split_ci95"] == by_base and 0.0 < by_base[0] < by_base[1] < 1.0


def test_clustered_intervals_are_the_seed_clustered_ones_where_the_seeds_are_the_clusters() -> None:
    generator = random.Random(7)
    for _ in range(50):
        tasks = [{s: generator.random() < 0.4 for s in range(generator.randint(2, 6))} for _ in range(4)]
        expected = seed_clustered_interval(tasks)
        found = clustered_sr_interval([(None, {s: float(v) for s, v in t.items()}) for t in tasks])
        assert found == pytest.approx(expected)
    # A difference over clusters: mean +- t(0.975, K - 1) x the cluster-robust standard error.
    low, high = clustered_difference_interval([("a", {0: -1.0}), ("b", {0: 0.0}), ("c", {0: 0.0}), ("d", {0: 0.0})])
    variance = 4 / 3 * ((-1 + 0.25) ** 2 + 3 * 0.25**2) / 16  # residuals (d_t - mean) / T
    assert low == -1.0  # clipped to the differences' range
    assert high == pytest.approx(-0.25 + 3.18245 * math.sqrt(variance), rel=1e-4)
    assert clustered_difference_interval([("a", {0: -1.0}), ("a", {0: 0.0})]) == (-1.0, 1.0)


def test_eval_info_leaves_the_controls_out(tmp_path: Path) -> None:
    benchmark = load_benchmark(toy(tmp_path))
    selection = select(benchmark, "all", control_arm=True)
    latest = LatestRecords(RunDir(tmp_path / "run"))
    toy_records(latest, [t.env_id for t in selection.tasks])
    written = eval_info(selection, latest)
    assert [(t["task_group"], t["task_id"]) for t in written["per_task"]] == [("s", 0), ("s", 1), ("s", 2), ("s", 3)]
    assert written["overall"]["n_episodes"] == 8


def test_the_report_draws_the_axes_with_the_controls_and_tables_the_paired_differences(tmp_path: Path) -> None:
    benchmark = load_benchmark(toy(tmp_path))
    selection = select(benchmark, "all", control_arm=True)
    latest = LatestRecords(RunDir(tmp_path / "run"))
    toy_records(latest, [t.env_id for t in selection.tasks])
    body, per_task = summary(selection, latest, interrupted=False)
    page = render_report(RunDir(tmp_path / "run"), body, per_task, "spy")
    assert '<svg id="axes-chart"' in page and 'data-group="camera"' in page and 'class="control"' in page
    assert "-50.0 pts vs control [-50.0, -50.0]" in page
    assert "95% interval (base task as clusters)" in page
    paired = tmp_path / "page.html"
    paired.write_text(page, encoding="utf-8")
    rows = read_page(paired).rows["paired"]
    assert [row["data-name"] for row in rows] == ["s", "camera", "noise"]


def test_a_session_runs_the_control_arm_beside_the_selected_tasks(fake: pytest.Pytester) -> None:
    """``--vla-control-arm`` adds the controls of the selected tasks to a real session."""
    fake.path.joinpath("robust.yaml").write_text(yaml.safe_dump(TOY, sort_keys=False))
    result = fake.runpytest(
        "--benchmark=robust.yaml:camera", "--vla-control-arm", "--policy=zero", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=8)  # 2 variants and their 2 controls, 2 seeds each
    body = read_json(run_dir(fake) / "summary.json")
    assert body["control_arm"]["tasks"] == CONTROLS
    assert body["control_arm"]["paired"]["dimension"]["camera"]["difference"] == 0.0
    assert set(body["per_task_sr"]) == {"A-cam-v0", "B-cam-v0", *CONTROLS}
