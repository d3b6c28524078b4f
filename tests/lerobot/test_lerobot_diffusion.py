"""A LeRobot policy that samples (Diffusion) scores each episode as ``lerobot-eval --seed=SEED
--eval.n_episodes=1`` scores its one episode, whatever the order and the split: its noise is drawn
from where that run's seeding and building left torch's generator.

The random-init Diffusion checkpoint of ``lerobot_checkpoints`` (a real DDIM sampler, 10 steps, 8
actions a chunk) on Push-T's seeds 1202-1204, episodes capped at STEPS steps (``--env.episode_length``
there, a copy of the benchmark file here): the real ``lerobot-eval`` once per seed, and ours serially
in reverse order and under ``-n 2``. Success, length and maximum reward are equal (the maximum to
1 ulp: gym-pusht's own last bit moves with what ran before in a process), and so are the sums of
rewards up to the order of summation, where an action one float32 digit off moves a sum by 1e-7.
Both sides run torch on one thread, as a convolution's last digits move with the thread count. The
same episodes as one lockstep block with batched inference (``lerobot:DIR:batched``) stay within the
last digits' reach of them.
These need ``vlaeval install lerobot``; they fail, never skip, without it.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import REVERSED_ORDER, capped_benchmark, episode_records, read_json
from lerobot_reference import (  # noqa: F401
    lerobot_session,
    pusht_diffusion_checkpoint,
    run_lerobot_eval,
    within_one_ulp,
)

pytestmark = [pytest.mark.lerobot, pytest.mark.long, pytest.mark.minutes(2)]

SEEDS = (1202, 1203, 1204)
STEPS = 48
"""Six chunks: the pusher moves the block on each of these seeds, so the rewards follow the actions."""

LISTS = ("successes", "max_rewards", "sum_rewards")
"""eval_info.json's per-episode lists, lerobot-eval's and ours."""

BATCHED_TOLERANCE = 1e-3
"""Relative: batched inference moves the actions' last float32 digits (docs/lerobot.md measures what
that does over 300 steps); these 48 stay close."""

SUM_TOLERANCE = 1e-12
"""Relative: lerobot-eval sums a float64 tensor, we add step by step."""


def start_session(directory: Path, checkpoint: Path, *args: str):
    directory.mkdir(parents=True, exist_ok=True)
    benchmark = capped_benchmark("pusht", STEPS, directory)
    episodes = (f"--episodes={len(SEEDS)}", f"--vla-start-seed={SEEDS[0]}")
    return lerobot_session(directory, str(benchmark), checkpoint, *episodes, *args)


def test_diffusion_episodes_are_lerobot_evals_one_episode_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pusht_diffusion_checkpoint: Path,  # noqa: F811
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # lerobot-eval, our server and workers alike
    env_args = ["--env.type=pusht", "--env.visualization_width=96", "--env.visualization_height=96"]
    env_args.append(f"--env.episode_length={STEPS}")
    with ThreadPoolExecutor(len(SEEDS)) as pool:
        runs = pool.map(
            lambda seed: run_lerobot_eval(pusht_diffusion_checkpoint, tmp_path / f"eval-{seed}", env_args, 1, seed),
            SEEDS,
        )
        theirs = {seed: run.episodes["pusht"][0] for seed, run in zip(SEEDS, runs, strict=True)}
    (tmp_path / "reversed").mkdir()
    (tmp_path / "reversed" / "conftest.py").write_text(REVERSED_ORDER)
    sessions = {
        "reversed": start_session(tmp_path / "reversed", pusht_diffusion_checkpoint),
        "parallel": start_session(tmp_path / "parallel", pusht_diffusion_checkpoint, "-n", "2"),
    }
    batched = start_session(tmp_path / "batched", Path(f"{pusht_diffusion_checkpoint}:batched"), "--vla-lockstep=3")
    for name, proc in sessions.items():
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode in (0, 1), output[-3000:]  # 1: episodes failed (a random policy)
        (run_dir,) = (tmp_path / name / "results").iterdir()
        records = episode_records(run_dir)
        for seed, episode in theirs.items():
            record = records[("PushT-v0", seed)]
            assert record["success"] == episode.success and record["length"] == episode.length == STEPS, (name, seed)
            assert within_one_ulp(record["extras"]["max_reward"], episode.max_reward), (name, seed, record, episode)
            assert record["episode_return"] == pytest.approx(episode.sum_reward, rel=SUM_TOLERANCE), (name, seed)
        task = read_json(run_dir / "eval_info.json")["per_task"][0]
        seeds = task["vlaeval"]["seeds"]
        lists = {key: dict(zip(seeds, task["metrics"][key], strict=True)) for key in LISTS}
        for seed, episode in theirs.items():  # eval_info.json's lists, ours against lerobot-eval's
            assert lists["successes"][seed] == episode.success, (name, seed)
            assert within_one_ulp(lists["max_rewards"][seed], episode.max_reward), (name, seed)
            assert lists["sum_rewards"][seed] == pytest.approx(episode.sum_reward, rel=SUM_TOLERANCE), (name, seed)
        if name == "reversed":
            (log,) = (run_dir / "episodes").glob("*.jsonl")
            assert [json.loads(line)["seed"] for line in log.read_text().splitlines()] == list(SEEDS[::-1])
        else:
            assert {r["worker"] for r in records.values()} == {"gw0", "gw1"}
    output, _ = batched.communicate(timeout=900)
    assert batched.returncode in (0, 1), output[-3000:]
    (run_dir,) = (tmp_path / "batched" / "results").iterdir()
    records = episode_records(run_dir)
    for seed, episode in theirs.items():  # one forward pass for the block: the same episodes, to the last digits
        record = records[("PushT-v0", seed)]
        assert record["model"]["config"]["batched"] is True and record["lockstep"] == len(SEEDS), record
        assert record["success"] == episode.success and record["length"] == episode.length, seed
        assert record["extras"]["max_reward"] == pytest.approx(episode.max_reward, rel=BATCHED_TOLERANCE), seed
        assert record["episode_return"] == pytest.approx(episode.sum_reward, rel=BATCHED_TOLERANCE), seed
    assert all(
        episode.max_reward > 0 and episode.max_reward * STEPS != episode.sum_reward for episode in theirs.values()
    ), "the pusher moved the block in every episode: its rewards follow the sampled actions"
