"""A LeRobot checkpoint through this plugin equals ``lerobot-eval`` itself, episode by episode.

The same random-init ACT checkpoint (``lerobot_checkpoints``) on Push-T's seeds 1000-1009: once by
the real ``lerobot-eval`` at ``--eval.batch_size=1`` (``lerobot_reference``), and by
``pytest --policy=lerobot:DIR``, whose workers run in LeRobot's interpreter with the policy beside
the env, serially in reverse order and under ``-n 2``. Success and length are equal, the max reward to 1 ulp (gym-pusht orders its
shapes by memory address, so lerobot-eval's own value for a seed moves by 1 ulp with what ran before
it in its process), and the sum of rewards up to the order of summation (lerobot-eval sums a float64
tensor, we add step by step). The lerobot-eval
output directory is then this run's baseline (the gate pairs it by seed) and a run to compare.
These need ``vlaeval install lerobot``; they fail, never skip, without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REVERSED_ORDER, episode_records, read_json
from lerobot_reference import (  # noqa: F401
    PUSHT_EPISODES,
    PUSHT_SEED,
    lerobot_session,
    pusht_act_checkpoint,
    pusht_act_reference,
    within_one_ulp,
)

pytestmark = [pytest.mark.lerobot, pytest.mark.long, pytest.mark.minutes(3)]

SUM_TOLERANCE = 1e-12
"""Relative: two summation orders of 300 float64 rewards differ in the last bits (seen: 3e-15)."""


def pusht_session(directory: Path, checkpoint: Path, *args: str) -> subprocess.Popen[str]:
    return lerobot_session(
        directory, "pusht", checkpoint, f"--episodes={PUSHT_EPISODES}", f"--vla-start-seed={PUSHT_SEED}", *args
    )


def test_lerobot_checkpoint_episodes_equal_lerobot_evals(
    tmp_path: Path,
    pusht_act_checkpoint: Path,  # noqa: F811
    pusht_act_reference,  # noqa: F811
) -> None:
    reference = pusht_act_reference.episodes["pusht"]
    assert [episode.seed for episode in reference] == list(range(PUSHT_SEED, PUSHT_SEED + PUSHT_EPISODES))
    (tmp_path / "reversed").mkdir()
    (tmp_path / "reversed" / "conftest.py").write_text(REVERSED_ORDER)
    baseline = f"--vla-baseline={pusht_act_reference.output_dir}:seed={PUSHT_SEED}"
    sessions = {
        "reversed": pusht_session(tmp_path / "reversed", pusht_act_checkpoint),
        "parallel": pusht_session(tmp_path / "parallel", pusht_act_checkpoint, "-n", "2", baseline),
    }
    runs = {}
    for name, proc in sessions.items():
        output, _ = proc.communicate(timeout=1800)
        assert proc.returncode in (0, 1), output[-3000:]  # 1: episodes failed, as lerobot-eval's did
        (run_dir,) = (tmp_path / name / "results").iterdir()
        runs[name] = run_dir
        records = episode_records(run_dir)
        for episode in reference:
            record = records[("PushT-v0", episode.seed)]
            assert record["success"] == episode.success, (name, episode)
            assert within_one_ulp(record["extras"]["max_reward"], episode.max_reward), (name, episode)
            assert record["episode_return"] == pytest.approx(episode.sum_reward, rel=SUM_TOLERANCE, abs=1e-300)
            if episode.length is not None:
                assert record["length"] == episode.length, (name, episode)
            assert record["instruction"] == "", "Push-T's task string is lerobot-eval's: empty"
        if name == "parallel":
            assert "vlaeval gate: PASS: split SR drop +0.000 paired on 10 seeds" in output, output[-3000:]
    assert sum(episode.sum_reward > 0 for episode in reference) >= 3, "the episodes differ: a comparison that can fail"
    (log,) = (runs["reversed"] / "episodes").glob("*.jsonl")
    seeds = [json.loads(line)["seed"] for line in log.read_text().splitlines()]
    assert seeds == list(range(PUSHT_SEED + PUSHT_EPISODES - 1, PUSHT_SEED - 1, -1))
    assert {record["worker"] for record in episode_records(runs["parallel"]).values()} == {"gw0", "gw1"}

    ours = read_json(runs["parallel"] / "eval_info.json")
    theirs = read_json(pusht_act_reference.output_dir / "eval_info.json")
    assert ours.keys() == theirs.keys() and ours["per_task"][0].keys() >= {"task_group", "task_id", "metrics"}
    assert ours["per_task"][0]["metrics"]["successes"] == theirs["per_task"][0]["metrics"]["successes"]
    max_rewards = zip(
        ours["per_task"][0]["metrics"]["max_rewards"], theirs["per_task"][0]["metrics"]["max_rewards"], strict=True
    )
    assert all(within_one_ulp(a, b) for a, b in max_rewards)
    assert ours["overall"]["pc_success"] == theirs["overall"]["pc_success"]

    theirs_dir = baseline.split("=", 1)[1]
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "compare", str(runs["parallel"]), theirs_dir, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "lerobot-eval" in compared.stdout, compared.stdout
    assert (tmp_path / "compare.md").is_file()
