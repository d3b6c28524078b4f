"""A LeRobot policy that samples (Diffusion) gives each episode noise of its own, drawn from the
episode's task and seed: the same actions whatever the order or the number of workers (so the same
success, maximum reward and length, and the return up to gym-pusht's last bits), different noise for
different seeds.

``lerobot-eval`` seeds torch's global generator once per run, so there episode k's noise depends on
episodes 0..k-1; ours are equal to its episodes in distribution, not bit for bit (see
``docs/lerobot.md``). The checkpoint is the random-init Diffusion policy of ``lerobot_checkpoints``
(a real DDIM sampler, 10 steps, 8 actions a chunk), its Push-T episodes capped at STEPS steps by a
copy of the benchmark file. These need ``vlaeval install lerobot``; they fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import REVERSED_ORDER, capped_benchmark, episode_records
from lerobot_reference import lerobot_python, lerobot_session, pusht_diffusion_checkpoint  # noqa: F401

pytestmark = [pytest.mark.lerobot, pytest.mark.long]

SEEDS = [1000, 1001, 1002, 1003]
STEPS = 48
"""Six action chunks: enough for the pusher to move the block on some of these seeds, so the
returns depend on the sampled actions."""

RETURN_TOLERANCE = 1e-12
"""Relative. The actions are equal bit for bit, but gym-pusht's reward is not: replaying one
episode's actions in one process, its reward at a step moved by one ulp after another episode had
run (seed 1003: sum 1.8196502346495476 against ...478)."""


SAMPLE = """
import json, sys
import numpy as np
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.policy.lerobot import LeRobotPolicy

OBS = {"pixels": np.full((96, 96, 3), 128, np.uint8), "agent_pos": np.array([256.0, 256.0]), "instruction": ""}
STEPS = 9  # two chunks: the policy samples at steps 0 and 8


def episode(seed):
    policy = LeRobotPolicy(sys.argv[1], "pusht")
    policy.reset(EpisodeInfo("PushT-v0", seed, "", 0, 300))
    return policy


def actions(seed):
    policy = episode(seed)
    return [policy.act(OBS).tolist() for _ in range(STEPS)]


first, other, again = actions(1000), actions(1001), actions(1000)
a, b = episode(1000), episode(1001)  # two episodes stepping in turn, as two workers on one server
interleaved = [[a.act(OBS).tolist(), b.act(OBS).tolist()] for _ in range(STEPS)]
print(json.dumps({"first": first, "other": other, "again": again, "interleaved": interleaved}))
"""


def start_session(directory: Path, checkpoint: Path, *args: str) -> subprocess.Popen[str]:
    directory.mkdir(parents=True, exist_ok=True)
    benchmark = capped_benchmark("pusht", STEPS, directory)
    episodes = (f"--episodes={len(SEEDS)}", f"--vla-start-seed={SEEDS[0]}")
    return lerobot_session(directory, str(benchmark), checkpoint, *episodes, *args)


def test_diffusion_episodes_are_the_same_in_any_order_and_under_xdist(
    tmp_path: Path,
    pusht_diffusion_checkpoint: Path,  # noqa: F811
) -> None:
    (tmp_path / "reversed").mkdir()
    (tmp_path / "reversed" / "conftest.py").write_text(REVERSED_ORDER)
    sessions = {
        "reversed": start_session(tmp_path / "reversed", pusht_diffusion_checkpoint),
        # each worker runs its episodes in seed order, interleaved with the other's on one server
        "parallel": start_session(tmp_path / "parallel", pusht_diffusion_checkpoint, "-n", "2"),
    }
    episodes = {}
    for name, proc in sessions.items():
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode in (0, 1), output[-3000:]  # 1: episodes failed (a random policy)
        (run_dir,) = (tmp_path / name / "results").iterdir()
        records = episode_records(run_dir)
        assert sorted(seed for _, seed in records) == SEEDS, (name, sorted(records))
        episodes[name] = {
            seed: (r["outcome"], r["success"], r["extras"]["max_reward"], r["length"], r["episode_return"])
            for (_, seed), r in records.items()
        }
        if name == "reversed":
            (log,) = (run_dir / "episodes").glob("*.jsonl")
            assert [json.loads(line)["seed"] for line in log.read_text().splitlines()] == SEEDS[::-1]
        else:
            assert {r["worker"] for r in records.values()} == {"gw0", "gw1"}
    for seed in SEEDS:
        *exact, ret = episodes["reversed"][seed]
        assert exact == list(episodes["parallel"][seed][:-1]), (seed, episodes)
        assert ret == pytest.approx(episodes["parallel"][seed][-1], rel=RETURN_TOLERANCE, abs=1e-300), (seed, episodes)
    # The reward changed within an episode (a constant reward sums to length x max): the pusher moved
    # the block, so the returns compared above depend on the sampled actions.
    assert any(ret != length * top for _, _, top, length, ret in episodes["parallel"].values()), episodes


def test_diffusion_noise_is_drawn_per_episode_from_its_seed(pusht_diffusion_checkpoint: Path) -> None:  # noqa: F811
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run(
        [str(lerobot_python()), "-c", SAMPLE, str(pusht_diffusion_checkpoint)],
        env={**environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    first, other = got["first"], got["other"]
    assert first != other, "one observation, two seeds: the sampled actions differ"
    assert first[0] != first[8], "one observation, two chunks of one episode: the generator moves on"
    assert got["again"] == first, "the same seed again, after another episode: the same actions"
    assert [pair[0] for pair in got["interleaved"]] == first
    assert [pair[1] for pair in got["interleaved"]] == other
