"""What a benchmark file adds beyond tasks and axes, on the fake benchmark: selection by a group of
any axis, splits that cannot run here, the grid of two axes and its total, episode extras, result
fields, and the adapter contract checked where the env is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import assert_one_line_usage_error, episode_records, read_json, run_dir

from pytest_vlaeval.benchmark.model import load_benchmark, select
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.canonical import grid_summary

HERE = Path(__file__).parent

GRID_BENCHMARK = {
    "name": "griddy",
    "env": {"factory": "fake_env:make_env", "action_dim": 7, "policy_obs_keys": ["rgb", "proprio"], "mode": "m1"},
    "protocol": {"start_seed": 0, "episodes": 2},
    "axes": [
        {"field": "split", "label": "suite"},
        {"field": "base", "label": "base suite", "summary": "sr_per_base"},
        {"field": "change", "label": "perturbation", "summary": "sr_per_change"},
    ],
    "unavailable_splits": {"a_env": "no scenes for this perturbation in this release"},
    "grid": {
        "rows": "base",
        "columns": "change",
        "row_groups": ["a", "object"],
        "column_groups": ["object", "swap", "env"],
        "total": "the unweighted mean of the cells",
    },
    "tasks": [
        {"env_id": "A-obj", "split": "a_object", "base": "a", "change": "object", "max_steps": 4},
        {"env_id": "A-swap", "split": "a_swap", "base": "a", "change": "swap", "max_steps": 4},
        {"env_id": "O-obj", "split": "object_object", "base": "object", "change": "object", "max_steps": 4},
        {"env_id": "O-obj2", "split": "object_object", "base": "object", "change": "object", "max_steps": 4},
        {"env_id": "O-swap", "split": "object_swap", "base": "object", "change": "swap", "max_steps": 4},
    ],
}


@pytest.fixture
def griddy(tmp_path: Path) -> Path:
    path = tmp_path / "griddy.yaml"
    path.write_text(yaml.safe_dump(GRID_BENCHMARK, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("selector", "tasks"),
    [
        ("a_swap", ["A-swap"]),
        ("all", ["A-obj", "A-swap", "O-obj", "O-obj2", "O-swap"]),
        ("a", ["A-obj", "A-swap"]),  # a whole base suite: a group of one axis
        ("swap", ["A-swap", "O-swap"]),
        ("base=object", ["O-obj", "O-obj2", "O-swap"]),
        ("change=object", ["A-obj", "O-obj", "O-obj2"]),
        ("Change=Object", ["A-obj", "O-obj", "O-obj2"]),
    ],
)
def test_a_selector_names_a_split_or_a_group_of_any_axis(griddy: Path, selector: str, tasks: list[str]) -> None:
    assert [t.env_id for t in select(load_benchmark(griddy), selector).tasks] == tasks


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("object", "'object' is a group along 2 axes of 'griddy'; write griddy:base=object or griddy:change=object"),
        ("a_env", "split 'a_env' of 'griddy' cannot run here: no scenes for this perturbation in this release"),
        (
            "nope",
            "unknown split 'nope' for benchmark 'griddy'; valid: a_object, a_swap, object_object, object_swap, all",
        ),
        ("base=swap", "unknown split 'base=swap'"),
    ],
)
def test_a_selector_that_cannot_run_is_one_line(griddy: Path, selector: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        select(load_benchmark(griddy), selector)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_grid_total_is_the_mean_of_its_cells_and_names_the_missing_ones(griddy: Path) -> None:
    """A cell is the mean of its tasks' SRs; the total the unweighted mean of the cells with results
    (not of the tasks: O-obj's cell has two); its interval only where cells are of one size."""
    benchmark = load_benchmark(griddy)
    grid = benchmark.reporting.grid
    assert grid is not None
    results = [
        {"env_id": t.env_id, "base": dict(t.groups)["base"], "change": dict(t.groups)["change"], "sr": sr}
        for t, sr in zip(benchmark.tasks, [1.0, 0.5, 0.0, 1.0, 0.0], strict=True)
    ]
    summary = grid_summary(grid, results, benchmark.unavailable_splits)  # type: ignore[arg-type]
    assert summary["cells"] == {
        "a": {"object": 1.0, "swap": 0.5, "env": None},
        "object": {"object": 0.5, "swap": 0.0, "env": None},
    }
    assert summary["total"] == pytest.approx((1.0 + 0.5 + 0.5 + 0.0) / 4)
    assert summary["total_ci95"] is None  # cells of 1 and 2 tasks: the task mean is not the total
    assert summary["missing_cells"] == ["a/env", "object/env"] and summary["complete"] is False
    assert summary["unavailable_splits"] == {"a_env": "no scenes for this perturbation in this release"}


def test_a_session_writes_the_grid_extras_and_result_fields(pytester: pytest.Pytester, griddy: Path) -> None:
    """A real session on the grid benchmark: the grid and its total in summary.json and report.md;
    each record keeps its adapter's extras as given and the task files summarise them."""
    data = yaml.safe_load(griddy.read_text())
    data["result_fields"] = ["mode"]
    data["episode_extras"] = [{"field": "bar", "reduce": "sum", "summary": "bar_total"}]
    data["pooled_success_key"] = "pc_success"
    data["mean_of_groups"] = "change"
    griddy.write_text(yaml.safe_dump(data, sort_keys=False))
    pytester.syspathinsert(HERE)
    result = pytester.runpytest(f"--benchmark={griddy}", "--policy=random", "-p", "no:cacheprovider")
    assert result.ret in (0, 1), result.stdout.str()
    directory = run_dir(pytester)
    summary = read_json(directory / "summary.json")
    records = episode_records(directory)
    assert {r["extras"]["bar"] for r in records.values()} == {0.5, 0.6}  # seeds 0 and 1
    task = read_json(directory / "O-obj.json")
    assert task["mode"] == "m1" and task["bar_total"] == pytest.approx(1.1)
    assert summary["bar_total"] == pytest.approx(5 * 1.1)
    completed = [r for r in records.values() if r["outcome"] != "error"]
    pooled = sum(r["success"] for r in completed) / len(completed)
    assert summary["sr_pooled"] == pooled and summary["pc_success"] == 100 * pooled
    assert summary["benchmark_metrics"] == ["bar_total", "pc_success", "sr_mean_of_change"]
    by_change = summary["sr_per_change"]
    assert summary["sr_mean_of_change"] == pytest.approx(sum(by_change.values()) / len(by_change))
    cells = summary["grid"]["cells"]
    assert cells["a"]["object"] == summary["per_task_sr"]["A-obj"] and cells["a"]["env"] is None
    report = (directory / "report.md").read_text()
    assert "| base suite x perturbation | object | swap | env |" in report
    assert "Over 4 of 6 cells, without a/env, object/env; cannot run here: a\\_env (summary.json" in report


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"result_fields": ["nope"]}, "result field 'nope' is not an option of env"),
        ({"episode_extras": [{"field": "x", "reduce": "sum", "summary": "sr"}]}, "would write over the key 'sr'"),
        (
            {"episode_extras": [{"field": "x", "reduce": "max"}]},
            "Invalid enum value 'max' - at `episode_extras[0].reduce`",
        ),
        ({"pooled_success_key": "n_errors"}, "pooled_success_key would write over the key 'n_errors' of summary.json"),
        ({"unavailable_splits": {"a_swap": "gone"}}, "splits ['a_swap'] are both unavailable and given tasks"),
        ({"grid": {**GRID_BENCHMARK["grid"], "rows": "colour"}}, "grid axis 'colour' is not one of the axes"),
        ({"mean_of_groups": "colour"}, "mean_of_groups 'colour' is not one of the axes"),
    ],
)
def test_a_bad_reporting_entry_is_one_spec_error(griddy: Path, edit: dict, message: str) -> None:
    griddy.write_text(yaml.safe_dump({**GRID_BENCHMARK, **edit}, sort_keys=False))
    with pytest.raises(SpecError) as caught:
        load_benchmark(griddy)
    assert message in str(caught.value) and "\n" not in str(caught.value)


NOT_AN_ADAPTER = """
class Half:
    max_episode_steps = 3

    def reset(self, *, seed, options):
        return {}, {}

    def step(self, action):
        return {}, 0.0, False, False, {"success": False}


def make_env(task, benchmark, render_request):
    return Half()
"""


def test_an_env_that_is_not_an_adapter_is_an_env_error_naming_what_it_lacks(
    pytester: pytest.Pytester, griddy: Path
) -> None:
    pytester.makepyfile(half_env=NOT_AN_ADAPTER)
    data = yaml.safe_load(griddy.read_text())
    data["env"]["factory"] = "half_env:make_env"
    griddy.write_text(yaml.safe_dump(data, sort_keys=False))
    pytester.syspathinsert()
    result = pytester.runpytest(f"--benchmark={griddy}:a_swap", "--policy=zero", "-p", "no:cacheprovider")
    (record, *_) = episode_records(run_dir(pytester)).values()
    assert record["outcome"] == "error" and record["error_kind"] == "env", record
    assert record["message"] == (
        "half_env:make_env returned a Half without render_backend, render_frame, episode_extras, close: an env "
        "adapter implements pytest_vlaeval.envs.adapter.EnvAdapter (subclass its Adapter for the optional parts)"
    )
    assert result.ret != 0


def test_a_bad_selector_on_the_command_line_is_one_usage_line(pytester: pytest.Pytester, griddy: Path) -> None:
    result = pytester.runpytest(f"--benchmark={griddy}:object", "--policy=zero", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "write griddy:base=object or griddy:change=object")
