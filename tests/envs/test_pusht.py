"""Real Push-T episodes (gym-pusht, pure Python): a few seconds each, so they run in the default suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from episode_digest import DIGEST_DIR
from helpers import REVERSED_ORDER, ROOT, TESTS, ended_on_exit, episode_records, read_json

from pytest_vlaeval.benchmark.model import load_benchmark


def test_pusht_episodes_run_to_the_protocol(tmp_path: Path) -> None:
    """LeRobot's protocol: seeds 1000 + i, 300 steps, a 2-dim absolute action; the zero policy (the
    pusher parked in a corner) never succeeds, and the same seeds give the same episodes under -n 2."""
    args = ["--benchmark=pusht", "--episodes=2", "--policy=zero", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    runs = {}
    for name, extra in (("serial", []), ("parallel", ["-n", "2"])):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *args, *extra, f"--vla-results={name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # failed episodes, no error
        (run_dir,) = (tmp_path / name).iterdir()
        runs[name] = episode_records(run_dir)
    result = read_json(run_dir / "PushT-v0.json")
    assert result["episode_seeds"] == [1000, 1001] and result["start_seed"] == 1000
    assert result["successes"] == [False, False] and result["episode_lengths"] == [300, 300]
    assert result["action_chunk_size"] == 1 and result["split"] == "pusht"

    def outcome(records: dict) -> dict:
        return {key: (r["success"], r["episode_return"], r["length"]) for key, r in records.items()}

    assert outcome(runs["serial"]) == outcome(runs["parallel"])
    assert {r["render_backend"] for r in runs["serial"].values()} == {"pygame"}


def test_frames_read_without_copy_equal_gym_pushts_own() -> None:
    """Our env reads its screen through a view of its pixels (``pusht._read_frames_without_copy``):
    over two seeds of random pushes, every observation and ``render()`` frame equals gym-pusht's own
    env's, and the screen gym-pusht draws on (a plain ``pygame.Surface``) is one the view reads."""
    import gymnasium as gym
    import numpy as np
    import pygame

    from pytest_vlaeval.envs.pusht import ENV_ID, _colour_bytes, make_env

    benchmark = load_benchmark(ROOT / "benchmarks" / "pusht.yaml")
    task = benchmark.task("PushT-v0")
    ours = make_env(task, benchmark, "auto")
    theirs = gym.make(ENV_ID, obs_type=benchmark.env.options["obs_type"], render_mode="rgb_array")
    assert "_get_img" in vars(ours.env.unwrapped) and "_get_img" not in vars(theirs.unwrapped)
    assert _colour_bytes(pygame.Surface((512, 512))) is not None
    rng = np.random.default_rng(0)
    try:
        for seed in (1000, 1001):
            obs, _ = ours.reset(seed=seed, options={})
            expected, _ = theirs.reset(seed=seed)
            for _ in range(60):
                assert obs["pixels"].dtype == expected["pixels"].dtype
                assert np.array_equal(obs["pixels"], expected["pixels"]) and obs["pixels"].flags.writeable
                assert obs["pixels"].flags.c_contiguous
                action = rng.uniform(0, 512, 2)
                obs = ours.step(action)[0]
                expected = theirs.step(action.astype(np.float32))[0]
            assert np.array_equal(ours.env.render(), theirs.render())
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize(
    ("depth", "masks", "viewed"),
    [
        (32, (0xFF0000, 0xFF00, 0xFF, 0), True),  # what gym-pusht's screen is here: X, R, G, B from the top byte
        (32, (0xFF, 0xFF00, 0xFF0000, 0), True),  # the colours the other way round
        (32, (0xFF00, 0xFF0000, 0xFF000000, 0xFF), True),  # alpha in the low byte
        (24, (0xFF0000, 0xFF00, 0xFF, 0), False),  # 3-byte pixels: gym-pusht's own read
    ],
)
def test_a_frame_of_any_screen_layout_equals_gym_pushts_own(depth: int, masks: tuple[int, ...], viewed: bool) -> None:
    """The frame read from a screen of another pixel layout (another pygame, another display) equals
    gym-pusht's own read of it, C-contiguous as it is, at the observation's size and others; 4-byte
    pixels are read through the view, others by gym-pusht."""
    import numpy as np
    import pygame

    from pytest_vlaeval.envs import pusht as pusht_module

    benchmark = load_benchmark(ROOT / "benchmarks" / "pusht.yaml")
    env = pusht_module.make_env(benchmark.task("PushT-v0"), benchmark, "auto")
    pusht = env.env.unwrapped
    rng = np.random.default_rng(depth)
    try:
        screen = pygame.Surface((512, 512), depth=depth, masks=masks)
        assert (pusht_module._colour_bytes(screen) is not None) is viewed
        pygame.surfarray.blit_array(screen, rng.integers(0, 256, (512, 512, 3), dtype=np.uint8))
        for width, height in ((96, 96), (84, 84), (100, 60)):
            ours = pusht._get_img(screen, width, height)
            assert ours.shape == (height, width, 3) and ours.dtype == np.uint8 and ours.flags.c_contiguous
            assert np.array_equal(ours, type(pusht)._get_img(pusht, screen, width, height))
    finally:
        env.close()


def test_a_frame_grab_of_other_code_is_gym_pushts_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another ``_get_img`` than the one checked (another gym-pusht release) is left as it is."""
    from pytest_vlaeval.envs import pusht

    monkeypatch.setattr(pusht, "GET_IMG_SOURCE", "0" * 16)
    benchmark = load_benchmark(ROOT / "benchmarks" / "pusht.yaml")
    env = pusht.make_env(benchmark.task("PushT-v0"), benchmark, "auto")
    try:
        assert "_get_img" not in vars(env.env.unwrapped)
    finally:
        env.close()


PARITY_SEEDS = [1000, 1001, 1002, 1003, 1004]
SOLVED_SEED = 1015
"""The scripted pusher's quickest success among seeds 1000-1049 (64 steps)."""


def pusher_session(directory: Path, *args: str, policy: str = "pusht_reference:Pusher") -> subprocess.Popen[str]:
    """A Push-T pytest session in its own process, started (not waited for): the scripted pusher
    unless ``policy`` says otherwise, writing its digests to ``digests/``."""
    (directory / "digests").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(TESTS), DIGEST_DIR: str(directory / "digests")}
    command = [sys.executable, "-m", "pytest", "--benchmark=pusht", f"--policy={policy}", "-p", "no:cacheprovider"]
    command += ["--rootdir", str(directory), "--vla-results=results", *args]
    return subprocess.Popen(
        command, cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finished(proc: subprocess.Popen[str], directory: Path) -> tuple[int, str, Path]:
    """The session's exit status, output and run directory, once it has ended."""
    output, _ = proc.communicate(timeout=600)
    (run_dir,) = (directory / "results").iterdir()
    return proc.returncode, output, run_dir


@pytest.mark.long
@pytest.mark.parity
def test_pusher_sessions_equal_the_lerobot_loop(tmp_path: Path) -> None:
    """Seeds 1000-1004 run serially in reverse order and under -n 2 are LeRobot's rollouts of the same
    seeds (``pusht_reference``, computed here while the sessions run): what the policy saw and did,
    bit for bit, its success, return and max reward."""
    from pusht_reference import reference_episodes

    serial_dir, parallel_dir, lockstep_dir = tmp_path / "serial", tmp_path / "parallel", tmp_path / "lockstep"
    serial_dir.mkdir()
    (serial_dir / "conftest.py").write_text(REVERSED_ORDER)
    serial = pusher_session(serial_dir, "--episodes=5")
    parallel = pusher_session(parallel_dir, "--episodes=5", "-n", "2")
    # Five episodes stepped together, ending at different steps: a row that ends never moves another's
    # start (lerobot-eval's vector envs autoreset, so there the next start depends on who ended when).
    lockstep = pusher_session(lockstep_dir, "--episodes=5", "--vla-lockstep=5")
    runs = {}
    with ended_on_exit(serial, parallel, lockstep):
        instruction = load_benchmark(ROOT / "benchmarks" / "pusht.yaml").task("PushT-v0").instruction
        reference = {episode["seed"]: episode for episode in reference_episodes(PARITY_SEEDS, instruction)}
        assert all(episode["success"] for episode in reference.values())  # the pusher solves these five
        for directory, proc in ((serial_dir, serial), (parallel_dir, parallel), (lockstep_dir, lockstep)):
            returncode, output, run_dir = finished(proc, directory)
            assert returncode == 0, output[-3000:]
            runs[directory.name] = records = episode_records(run_dir)
            assert sorted(seed for _, seed in records) == PARITY_SEEDS
            for seed, expected in reference.items():
                digest = read_json(directory / "digests" / f"PushT-v0-{seed}.json")
                assert digest == {key: expected[key] for key in digest}, seed
                record = records[("PushT-v0", seed)]
                assert (record["success"], record["length"]) == (expected["success"], expected["length"])
                assert record["episode_return"] == expected["episode_return"]
                assert record["extras"] == {"max_reward": expected["max_reward"]}
            result = read_json(run_dir / "PushT-v0.json")
            assert result["episode_seeds"] == PARITY_SEEDS and result["sr"] == 1.0
    (log,) = (serial_dir / "results").glob("*/episodes/*.jsonl")
    assert [json.loads(line)["seed"] for line in log.read_text().splitlines()] == PARITY_SEEDS[::-1]
    assert {record["worker"] for record in runs["parallel"].values()} <= {"gw0", "gw1"}
    assert {record["lockstep"] for record in runs["lockstep"].values()} != {None}
    assert len({record["length"] for record in runs["lockstep"].values()}) > 1, "the rows ended at different steps"


def test_the_scripted_pusher_solves_a_seed_the_zero_policy_does_not(tmp_path: Path) -> None:
    """On seed 1015 the pusher, seeing only the 96x96 image and its own position, succeeds; the zero
    policy (the pusher parked in a corner) does not."""
    pusher = pusher_session(tmp_path / "pusher", "--episodes=1", f"--vla-start-seed={SOLVED_SEED}")
    zero = pusher_session(tmp_path / "zero", "--episodes=1", f"--vla-start-seed={SOLVED_SEED}", policy="zero")
    with ended_on_exit(pusher, zero):
        for name, proc, status, success in (("pusher", pusher, 0, True), ("zero", zero, 1, False)):
            returncode, output, run_dir = finished(proc, tmp_path / name)
            assert returncode == status, output[-3000:]
            result = read_json(run_dir / "PushT-v0.json")
            assert result["episode_seeds"] == [SOLVED_SEED] and result["successes"] == [success]
            assert (result["avg_max_reward"] == 1.0) is success
