"""A LeRobot checkpoint through ``lerobot-eval`` and through this plugin, side by side in one run:
episodes per second on the same Push-T episodes, and what the hop to LeRobot's interpreter costs
per step.

The checkpoint is built here (``tests/lerobot_checkpoints.py``: random weights, LeRobot's own API)
in LeRobot's interpreter (``vlaeval install lerobot``). Rows: ``lerobot-eval`` at
``--eval.batch_size=1`` and at its automatic size (0: by CPU cores), then ``pytest
--policy=lerobot:DIR`` under ``-n 1``, ``-n 2`` and ``--vla-lockstep=8`` (eight episodes stepped
together on one worker, their requests one batch on the server). Each row is one whole command,
start-up included, on the same seeds. The hop's cost per step is this plugin's mean episode
wall time under ``-n 1`` less that of the same episodes with env and policy in one process of
LeRobot's interpreter (``policy.lerobot.LeRobotPolicy`` driven by a plain loop, no server), over
the mean episode length: the websocket round trip, the observation's encoding and the server's
batching. (``lerobot-eval``'s own ``eval_ep_s`` includes rendering its videos, which cannot be
turned off.)

    python scripts/bench_lerobot.py [--policy act|diffusion] [--episodes 16] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "tests")]

from pytest_vlaeval.install.interpreters import interpreter_python  # noqa: E402

START_SEED = 1000
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1"}


def lerobot_eval(python: Path, checkpoint: Path, episodes: int, batch_size: int, out: Path) -> tuple[float, dict]:
    """Wall seconds of one ``lerobot-eval`` command and its ``eval_info.json``."""
    command = [
        str(python.parent / "lerobot-eval"),
        f"--policy.path={checkpoint}",
        "--env.type=pusht",
        f"--eval.n_episodes={episodes}",
        f"--eval.batch_size={batch_size}",
        f"--seed={START_SEED}",
        "--policy.device=cpu",
        "--eval.use_async_envs=false",
        f"--output_dir={out}",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=OFFLINE, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lerobot-eval failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return wall, json.loads((out / "eval_info.json").read_text())


DIRECT = """
import json, sys, time
import gymnasium as gym
import gym_pusht  # noqa: F401
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.policy.lerobot import LeRobotPolicy

checkpoint, start, episodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = []
for seed in range(start, start + episodes):
    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos", render_mode="rgb_array",
                   max_episode_steps=300, disable_env_checker=True)
    policy = LeRobotPolicy(checkpoint, "pusht")  # loads the weights once, then a copy per episode
    started = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    policy.reset(EpisodeInfo("PushT-v0", seed, "", seed - start, 300))
    for length in range(1, 301):
        obs, _, terminated, truncated, _ = env.step(policy.act({**obs, "instruction": ""})[0])
        if terminated or truncated:
            break
    rows.append({"wall_time": time.perf_counter() - started, "length": length})
    env.close()
print(json.dumps(rows))
"""
"""The same episodes with env and policy in one process of LeRobot's interpreter: no hop."""


def direct(python: Path, checkpoint: Path, episodes: int) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    done = subprocess.run(
        [str(python), "-c", DIRECT, str(checkpoint), str(START_SEED), str(episodes)],
        capture_output=True,
        text=True,
        env=OFFLINE,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the direct loop failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def plugin(checkpoint: Path, episodes: int, extra: list[str], results: Path) -> tuple[float, list[dict]]:
    """Wall seconds of one ``pytest --policy=lerobot:DIR`` session and its episode records."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--benchmark=pusht",
        f"--policy=lerobot:{checkpoint}",
        f"--episodes={episodes}",
        f"--vla-results={results}",
        *extra,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=OFFLINE, cwd=results.parent, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest {' '.join(extra)} failed ({done.returncode}): {done.stdout.strip()[-2000:]}")
    records = [
        json.loads(line)
        for log in results.glob("*/episodes/*.jsonl")
        for line in log.read_text().splitlines()
        if line.strip()
    ]
    return wall, records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=("act", "diffusion"), default="act", help="the checkpoint's policy [act]")
    parser.add_argument("--episodes", type=int, default=16, help="Push-T episodes per row [16]")
    parser.add_argument("--smoke", action="store_true", help="two episodes a row: checks that the script works")
    args = parser.parse_args(argv)
    episodes = 2 if args.smoke else args.episodes
    python = interpreter_python("lerobot")
    if not python.is_file():
        raise SystemExit(f"no LeRobot interpreter at {python}: run `vlaeval install lerobot`")
    with tempfile.TemporaryDirectory(prefix="bench-lerobot-") as tmp:
        root = Path(tmp)
        checkpoint = root / "checkpoint"
        build = ["--env", "pusht", "--policy", args.policy, "--out", str(checkpoint)]
        subprocess.run(
            [str(python), str(ROOT / "tests" / "lerobot_checkpoints.py"), *build],
            check=True,
            env=OFFLINE,
            capture_output=True,
        )
        rows: list[tuple[str, float, float | None]] = []
        wall, info = lerobot_eval(python, checkpoint, episodes, 1, root / "lerobot-b1")
        rows.append(("lerobot-eval --eval.batch_size=1", wall, float(info["overall"]["eval_ep_s"])))
        wall, info = lerobot_eval(python, checkpoint, episodes, 0, root / "lerobot-auto")
        rows.append(("lerobot-eval --eval.batch_size=0 (auto)", wall, float(info["overall"]["eval_ep_s"])))
        wall, records = direct(python, checkpoint, episodes)
        direct_episode = sum(r["wall_time"] for r in records) / len(records)
        rows.append(("one process in LeRobot's interpreter", wall, direct_episode))
        hop = None
        for name, extra in (
            ("pytest -n 1", ["-n", "1"]),
            ("pytest -n 2", ["-n", "2"]),
            ("pytest --vla-lockstep=8", ["--vla-lockstep=8"]),
        ):
            results = root / name.replace(" ", "_").replace("=", "") / "results"
            results.parent.mkdir()
            wall, records = plugin(checkpoint, episodes, extra, results)
            mean_episode = sum(r["wall_time"] for r in records) / len(records)
            rows.append((name, wall, mean_episode))
            if extra == ["-n", "1"]:
                steps = sum(r["length"] for r in records) / len(records)
                hop = (mean_episode - direct_episode) / steps
    print(f"Push-T, {episodes} episodes from seed {START_SEED}, a random-init {args.policy} checkpoint on the CPU")
    print(f"{'command':<40} {'wall s':>8} {'episodes/s':>11} {'s/episode':>10} {'vs lerobot-eval b=1':>20}")
    base = rows[0][1]
    for name, wall, per_episode in rows:
        shown = f"{per_episode:.2f}" if per_episode is not None else "-"
        print(f"{name:<40} {wall:8.1f} {episodes / wall:11.3f} {shown:>10} {base / wall:19.2f}x")
    if hop is not None:
        print(f"the hop to LeRobot's interpreter: {hop * 1e3:+.2f} ms a step (pytest -n 1 less one process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
