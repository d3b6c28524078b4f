"""Unit tests of the pieces with rules of their own: specs, action validation, the SR formulas,
the store, assets and render-backend selection."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from pytest_vlaeval.distribute import cpu_share
from pytest_vlaeval.envs import assets, render
from pytest_vlaeval.errors import PolicyError, SpecError
from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy, as_action_chunk
from pytest_vlaeval.results.canonical import summary, task_result
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import RunStore, run_dir_name
from pytest_vlaeval.spec import resolve_benchmark, select

HERE = Path(__file__).parent


# -- specs -----------------------------------------------------------------------------------


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


def test_run_dir_name_is_deterministic_and_separates_selections() -> None:
    benchmark, _ = resolve_benchmark("mikasa")
    full = select(benchmark, "short")
    assert run_dir_name(full, "my_pkg.policies:make_policy") == "mikasa-short-my_pkg.policies_make_policy"
    narrowed = select(benchmark, "short", env_ids=["InterceptSlow-VLA-v0"])
    assert run_dir_name(narrowed, "random") == run_dir_name(narrowed, "random") != run_dir_name(full, "random")
    assert run_dir_name(select(benchmark, "short", episodes=5), "random") != run_dir_name(full, "random")


# -- actions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (1, 7), (4, 7), (1, 4, 7)])
def test_accepted_action_shapes_become_k_by_d(shape: tuple[int, ...]) -> None:
    out = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 100
    chunk = as_action_chunk(out, 7, chunk_size=4)
    assert chunk.dtype == np.float32 and chunk.shape == (int(np.prod(shape)) // 7, 7)
    assert not np.shares_memory(chunk, out)


@pytest.mark.torch
def test_torch_actions_are_accepted_and_copied() -> None:
    torch = pytest.importorskip("torch")

    tensor = torch.ones(2, 7)
    chunk = as_action_chunk(tensor, 7, chunk_size=2)
    tensor.zero_()
    assert chunk.sum() == 14


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (np.zeros((2, 6)), r"shape \(2, 6\)"),
        (np.zeros((2, 2, 7)), r"shape \(2, 2, 7\)"),
        (np.array([np.inf] * 7), "inf in an action chunk"),
        ("go left", r"policy returned text \(str"),
        (None, "policy returned None;"),
    ],
)
def test_invalid_actions_are_policy_errors(output: object, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        as_action_chunk(output, 7, chunk_size=2)


def test_random_policy_is_reproducible_per_task_and_seed_whatever_ran_before() -> None:
    def first_chunks(policy: RandomPolicy, task: str, seed: int) -> np.ndarray:
        policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=3))
        return np.stack([policy.act({}) for _ in range(3)])

    fresh = first_chunks(RandomPolicy(), "A", 1)
    used = RandomPolicy()
    first_chunks(used, "B", 9)
    assert np.array_equal(first_chunks(used, "A", 1), fresh)
    assert not np.array_equal(first_chunks(used, "B", 1), fresh)
    assert np.abs(fresh).max() <= 1.0


# -- success rates and the store -------------------------------------------------------------


def record(task: str, seed: int, outcome: str, time: str = "2026-01-01T00:00:00", **extra) -> EpisodeRecord:
    success = {"success": True, "failure": False}.get(outcome)
    return EpisodeRecord(
        task=task, seed=seed, outcome=outcome, success=success, episode_return=None if success is None else 1.0,
        length=None if success is None else 5, message="", wall_time=0.1, worker="main", time=time, **extra,
    )  # fmt: skip


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


def test_task_result_orders_episodes_by_seed() -> None:
    benchmark, _ = resolve_benchmark(str(HERE / "fake.yaml"))
    selection = select(benchmark, "short", episodes=2)
    result = task_result(
        benchmark.task("Beta-v0"), [record("Beta-v0", 101, "success"), record("Beta-v0", 100, "failure")], selection
    )
    assert result["episode_seeds"] == [100, 101] and result["successes"] == [False, True] and result["complete"]


def test_store_keeps_the_latest_attempt_and_ignores_a_torn_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append(record("A", 1, "failure", time="2026-01-01T00:00:01"))
    store.append(record("A", 2, "success", time="2026-01-01T00:00:02"))
    store.close()
    later = RunStore(tmp_path)
    later.append(dataclasses.replace(record("A", 1, "success", time="2026-01-01T00:00:03"), attempt=2))
    later.close()
    log = next((tmp_path / "episodes").glob("*.jsonl"))
    with log.open("a") as f:
        f.write('{"task": "A", "seed": 3, "outc')  # a crash mid-write
    loaded = LatestRecords.read(RunDir(tmp_path))
    assert sorted(loaded) == [("A", 1), ("A", 2)]
    assert loaded[("A", 1)].outcome == "success" and loaded[("A", 1)].attempt == 2


def test_store_refuses_a_different_fingerprint(tmp_path: Path) -> None:
    RunStore(tmp_path).claim({"policy": "random", "episodes": 50})
    RunStore(tmp_path).claim({"policy": "random", "episodes": 50})
    with pytest.raises(SpecError, match=r"different fingerprint \(episodes: 50 -> 2\)"):
        RunStore(tmp_path).claim({"policy": "random", "episodes": 2})


# -- assets ----------------------------------------------------------------------------------


@pytest.fixture
def package_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fake installed package and the spec of a data file it lacks."""
    package = tmp_path / "site" / "fakepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    payload = b"mesh bytes"
    source = tmp_path / "source"
    source.mkdir()
    (source / "bulb.glb").write_bytes(payload)
    return {
        "kind": "package_file",
        "package": "fakepkg",
        "path": "objects/bulb.glb",
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "url": (source / "bulb.glb").as_uri(),
        "source": source,
    }


def test_asset_install_from_a_folder_verifies_and_is_idempotent(package_file: dict) -> None:
    source = package_file.pop("source")
    assert "is missing from" in assets.problem("bulb", package_file)
    assert "installed" in assets.install_package_file("bulb", package_file, source_dir=source)
    assert assets.problem("bulb", package_file) is None
    assert "already installed" in assets.install_package_file("bulb", package_file, source_dir=source)


def test_asset_install_falls_back_to_the_pinned_url(package_file: dict, tmp_path: Path) -> None:
    package_file.pop("source")
    message = assets.install_package_file("bulb", package_file, source_dir=tmp_path / "empty")
    assert package_file["url"] in message and assets.problem("bulb", package_file) is None


def test_asset_install_rejects_wrong_bytes_and_never_overwrites_silently(package_file: dict) -> None:
    source = package_file.pop("source")
    target = assets.package_file_path(package_file)
    (source / "bulb.glb").write_bytes(b"tampered!!")
    with pytest.raises(RuntimeError, match="expected 10 bytes"):
        assets.install_package_file("bulb", package_file, source_dir=source)
    assert not target.exists()
    target.parent.mkdir(parents=True)
    target.write_bytes(b"other file")
    assert "does not match its pinned SHA-256" in assets.problem("bulb", package_file)
    with pytest.raises(RuntimeError, match="exists with different content; pass --force"):
        assets.install_package_file("bulb", package_file, source_dir=source)


# -- render backends -------------------------------------------------------------------------


def test_lavapipe_icd_is_found_by_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "ICD_DIRS", (str(tmp_path / "none"), str(tmp_path)))
    assert render.find_lavapipe_icd() is None
    (tmp_path / "lvp_icd.x86_64.json").write_text(json.dumps({"ICD": {}}))
    assert render.find_lavapipe_icd() == str(tmp_path / "lvp_icd.x86_64.json")


@pytest.mark.parametrize(("workers", "threads"), [(None, "16"), ("1", "16"), ("4", "4"), ("16", "1"), ("32", "1")])
def test_software_render_threads_share_the_cores_among_workers(
    workers: str | None, threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of N xdist workers gets cores / N lavapipe threads, not a fixed count per process."""
    monkeypatch.setattr(render.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    render.set_backend_env("cpu")
    assert os.environ["LP_NUM_THREADS"] == threads
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    render.set_backend_env("cpu")
    assert os.environ["LP_NUM_THREADS"] == "3", "the user's own setting wins"


@pytest.mark.parametrize(("workers", "threads"), [(None, None), ("1", None), ("4", "4"), ("32", "1")])
def test_a_worker_sizes_the_math_libraries_pools_to_its_share(
    workers: str | None, threads: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N xdist workers on 16 cores: OMP, MKL and OpenBLAS get 16 / N threads each; serial keeps their defaults."""
    monkeypatch.setattr(cpu_share.os, "sched_getaffinity", lambda pid: set(range(16)))
    for name in cpu_share.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    monkeypatch.setitem(cpu_share.sys.modules, "torch", None)  # not imported yet
    cpu_share.share_cpu_threads()
    assert [os.environ.get(name) for name in cpu_share.THREAD_VARIABLES] == [threads] * 3
    if threads:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        cpu_share.share_cpu_threads()
        assert os.environ["OMP_NUM_THREADS"] == "3", "the user's own setting wins"


@pytest.mark.torch
def test_render_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")

    assert render.resolve_backend("cpu") == "cpu" and render.resolve_backend("gpu") == "gpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert render.resolve_backend("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert render.resolve_backend("auto") == "gpu"
    assert render.make_kwargs("gpu") == {"sim_backend": "gpu", "render_backend": "gpu"}
    assert render.make_kwargs("gpu-render") == {"sim_backend": "cpu", "render_backend": "gpu"}
    with pytest.raises(ValueError, match="valid: auto, gpu, gpu-render, cpu"):
        render.resolve_backend("vulkan")


def test_cpu_env_points_vulkan_at_lavapipe_but_respects_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "ICD_DIRS", (str(tmp_path),))
    (tmp_path / "lvp_icd.json").write_text("{}")
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    render.set_backend_env("cpu")
    assert render.os.environ["VK_ICD_FILENAMES"] == str(tmp_path / "lvp_icd.json")
    monkeypatch.setenv("VK_ICD_FILENAMES", "/mine.json")
    render.set_backend_env("cpu")
    assert render.os.environ["VK_ICD_FILENAMES"] == "/mine.json"


def test_missing_software_vulkan_fails_fast_with_one_actionable_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "ICD_DIRS", (str(tmp_path),))
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    problem = render.check("cpu")
    assert problem.startswith("no software Vulkan driver (lavapipe ICD)") and "bookworm-backports" in problem
    assert "\n" not in problem
