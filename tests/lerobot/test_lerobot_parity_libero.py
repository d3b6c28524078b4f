"""A LeRobot checkpoint on LIBERO through this plugin equals ``lerobot-eval`` itself.

The random-init ACT checkpoint for LIBERO's features (``lerobot_checkpoints``: two 360x360 cameras
and the 8-vector state) on one task's first two episodes, seeds 1000 and 1001: once by the real
``lerobot-eval --env.type=libero`` at ``--eval.batch_size=1`` in LeRobot's interpreter, and once by
``pytest --benchmark=<lerobot-libero, that task>`` with ``--policy=lerobot:DIR``, the worker in
LeRobot's interpreter with the policy beside the env, the episodes in reverse order in one env: seed 1001 first,
then 1000, where lerobot-eval's env gives its n-th reset the n-th init state (a count of resets,
which with several envs depends on when episodes end, LeRobot issue 4152).

LIBERO's reward is 0 until success, which a random policy never reaches, so equal rewards say
little. What the episodes saw is compared instead: lerobot-eval's video of each episode (the
agentview camera, upright, a frame per step) against ours (``--vla-video=all``, the same camera):
the frames agree up to the two codecs' error, and differ far beyond it between two episodes (two
init states), so the check can fail. Both runs are cut to 20 steps (lerobot-eval's
``--env.episode_length``, ``capped_benchmark``'s copy of the file here): a LIBERO step renders two
cameras in software on a CPU.

It needs ``vlaeval install lerobot``; it fails, never skips, without it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import REVERSED_ORDER, capped_benchmark, episode_records, read_json
from lerobot_reference import beside_session, build_checkpoint, lerobot_python, lerobot_session, run_lerobot_eval

pytestmark = [pytest.mark.lerobot, pytest.mark.long, pytest.mark.minutes(2)]

TASK = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
SUITE = "libero_spatial"
SEED = 1000
EPISODES = 2
STEPS = 20
SAME_EPISODE = 3.0
"""Mean absolute difference (0-255) two encodings of the same frames stay under (their codec and our
VP8; seen: 2.0 and 2.1)."""
OTHER_EPISODE = 2 * SAME_EPISODE
"""Two init states' frames differ by more than this (seen: 7.3; one frame later in the same episode
differs by 2.3 at the first step, 6.3 at the twentieth)."""

FRAME_DIFFERENCES = """
import json, sys
import av
import numpy as np

def frames(path):
    with av.open(path) as container:
        return [f.to_ndarray(format="rgb24").astype(np.int16) for f in container.decode(video=0)]

theirs, ours = [frames(p) for p in sys.argv[1:3]], [frames(p) for p in sys.argv[3:5]]
print(json.dumps({
    "lengths": [[len(v) for v in theirs], [len(v) for v in ours]],
    # both have a frame at the reset and after every step; ours also the one after the last
    "diff": [[float(np.mean([np.abs(a - b).mean() for a, b in zip(t, o)])) for o in ours] for t in theirs],
}))
"""


def test_libero_episodes_equal_lerobot_evals_in_any_order(tmp_path: Path) -> None:
    checkpoint = build_checkpoint(tmp_path / "libero-act", "libero", "act")
    directory = tmp_path / "ours"
    directory.mkdir()
    (directory / "conftest.py").write_text(REVERSED_ORDER)
    benchmark = capped_benchmark("lerobot-libero", STEPS, tmp_path)
    args = (f"--vla-tasks={TASK}", f"--episodes={EPISODES}", f"--vla-start-seed={SEED}", "--vla-video=all")
    session = lerobot_session(directory, str(benchmark), checkpoint, *args)
    env_args = ["--env.type=libero", f"--env.task={SUITE}", "--env.task_ids=[0]", f"--env.episode_length={STEPS}"]
    reference, output = beside_session(
        session, lambda: run_lerobot_eval(checkpoint, tmp_path / "lerobot-eval", env_args, EPISODES, SEED)
    )
    theirs = reference.episodes[SUITE]
    assert session.returncode in (0, 1), output[-3000:]  # 1: the episodes failed, as lerobot-eval's did
    (run_dir,) = (directory / "results").iterdir()
    records = episode_records(run_dir)
    (log,) = (run_dir / "episodes").glob("*.jsonl")
    assert [json.loads(line)["seed"] for line in log.read_text().splitlines()] == [SEED + 1, SEED]

    for episode in theirs:
        ours = records[(TASK, episode.seed)]
        assert ours["outcome"] != "error", output[-3000:]
        assert ours["success"] == episode.success
        assert ours["length"] == episode.length == STEPS
        assert ours["extras"]["max_reward"] == episode.max_reward
        assert ours["episode_return"] == episode.sum_reward
        assert (
            ours["instruction"] == "pick up the black bowl between the plate and the ramekin and place it on the plate"
        )

    their_videos = read_json(reference.output_dir / "eval_info.json")["per_task"][0]["metrics"]["video_paths"]
    our_videos = [run_dir / records[(TASK, SEED + i)]["video"] for i in range(EPISODES)]
    compared = subprocess.run(
        [str(lerobot_python()), "-c", FRAME_DIFFERENCES, *their_videos, *map(str, our_videos)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stderr[-3000:]
    frames = json.loads(compared.stdout)
    assert frames["lengths"] == [[STEPS] * EPISODES, [STEPS + 1] * EPISODES], frames
    diff = frames["diff"]
    for i in range(EPISODES):
        assert diff[i][i] < SAME_EPISODE, diff  # episode i is theirs, frame by frame
        assert diff[i][1 - i] > OTHER_EPISODE, diff  # and not the other one: a check that can fail

    info = read_json(run_dir / "eval_info.json")
    their_info = read_json(reference.output_dir / "eval_info.json")
    assert info.keys() == their_info.keys()
    (task,) = info["per_task"]
    assert (task["task_group"], task["task_id"]) == (SUITE, 0)
    for key in ("successes", "max_rewards", "sum_rewards"):
        assert task["metrics"][key] == their_info["per_task"][0]["metrics"][key], key
