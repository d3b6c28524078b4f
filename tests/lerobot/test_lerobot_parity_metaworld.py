"""A LeRobot checkpoint on Meta-World through this plugin equals ``lerobot-eval`` itself.

The random-init ACT checkpoint for Meta-World's features (``lerobot_checkpoints``: a 480x480 image and
a 4-vector state) on one task's first episode, seed 1000: once by the real ``lerobot-eval
--env.type=metaworld`` at ``--eval.batch_size=1`` in LeRobot's interpreter, and once by
``pytest --benchmark=metaworld --policy=lerobot:DIR``, whose workers run in LeRobot's interpreter
(which holds Meta-World's stack at its pins) with the policy beside the env. A random policy never succeeds, so the episode runs the
env's whole 500 steps, and its rewards (a function of the arm's and the object's positions at every
step) can only agree if every observation and every action did: success, max reward and length are
equal, the sum of rewards up to the order of summation.

lerobot-eval renders Meta-World's 480x480 camera twice a step (the observation and its video) and has
no option to cap an episode, so one episode takes minutes on a CPU (about 165 s alone on two cores,
ours 90 s): this test has one task and one episode, and runs the two at the same time. It needs
``vlaeval install lerobot`` and ``vlaeval install metaworld``; it fails, never skips, without them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import episode_records, read_json
from lerobot_reference import beside_session, build_checkpoint, lerobot_session, run_lerobot_eval

pytestmark = [pytest.mark.lerobot, pytest.mark.metaworld, pytest.mark.long, pytest.mark.minutes(6)]

TASK = "push-v3"
SEED = 1000
STEPS = 500
"""Meta-World's own limit, which LeRobot's env keeps and this benchmark's file states."""
SUM_TOLERANCE = 1e-12
"""Relative: lerobot-eval sums a float64 tensor, we add step by step; 500 rewards differ in the last bits."""


def test_a_metaworld_episode_equals_lerobot_evals(tmp_path: Path) -> None:
    checkpoint = build_checkpoint(tmp_path / "metaworld-act", "metaworld", "act")
    directory = tmp_path / "ours"
    args = (f"--vla-tasks={TASK}", "--episodes=1", f"--vla-start-seed={SEED}")
    session = lerobot_session(directory, "metaworld", checkpoint, *args)
    env_args = ["--env.type=metaworld", f"--env.task={TASK}"]
    reference, output = beside_session(
        session, lambda: run_lerobot_eval(checkpoint, tmp_path / "lerobot-eval", env_args, 1, SEED)
    )
    (theirs,) = reference.episodes[TASK]
    assert session.returncode in (0, 1), output[-3000:]  # 1: the episode failed, as lerobot-eval's did
    (run_dir,) = (directory / "results").iterdir()
    ours = episode_records(run_dir)[(TASK, SEED)]

    assert ours["outcome"] != "error", output[-3000:]
    assert theirs.length == STEPS and not theirs.success, "a random policy runs the whole episode"
    assert theirs.max_reward > 0 and theirs.sum_reward > theirs.max_reward, "rewards that move: a check that can fail"
    assert ours["success"] == theirs.success
    assert ours["length"] == theirs.length
    assert ours["extras"]["max_reward"] == theirs.max_reward
    assert ours["episode_return"] == pytest.approx(theirs.sum_reward, rel=SUM_TOLERANCE, abs=1e-300)

    # Ours groups the task as LeRobot's MT50 run does (its difficulty); lerobot-eval given one task
    # makes it a group of its own: the numbers are the same.
    info = read_json(run_dir / "eval_info.json")
    theirs_info = read_json(reference.output_dir / "eval_info.json")
    assert info.keys() == theirs_info.keys()
    (task,) = info["per_task"]
    (their_task,) = theirs_info["per_task"]
    for key in ("successes", "max_rewards"):
        assert task["metrics"][key] == their_task["metrics"][key], key
    assert info["overall"]["pc_success"] == theirs_info["overall"]["pc_success"]

    # lerobot-eval's one-task group is read back as that task: compare shows it beside ours.
    out = tmp_path / "compare"
    theirs_dir = f"{reference.output_dir}:seed={SEED}"
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "compare", str(run_dir), theirs_dir, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "lerobot-eval" in compared.stdout, compared.stdout
    assert TASK in (out / "compare.md").read_text()
