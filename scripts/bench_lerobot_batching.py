"""Batched inference of a LeRobot checkpoint against batches of one, on the same Push-T episodes:
the wall time side by side, and what batching moved (successes flipped, the largest difference of
an episode's maximum reward and of its sum of rewards).

Both columns run the episodes in lockstep blocks (``--vla-lockstep``'s engine: ``run_group`` over
Push-T's adapter, a ``PolicyEngine`` over the checkpoint) in one process of LeRobot's interpreter
(``vlaeval install lerobot``), as a worker whose policy runs beside the env does: ``lerobot:DIR``
computes a block's rows one at a time, ``lerobot:DIR:batched`` the chunks of the rows that ask at
one step in one forward pass. The checkpoints are the random-init ACT and Diffusion of
``tests/lerobot_checkpoints.py``, built here; torch uses ``--threads`` threads in both (one by
default: the numbers then do not depend on what else the machine runs). The timed part is the
episodes (env steps included), not the loading; of its CPU time, the policy's (its calls from the
engine: pre- and post-processing, inference) is given apart.

    python scripts/bench_lerobot_batching.py [--policy act diffusion] [--episodes 200] [--steps 300]
                                             [--block 8] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_vlaeval.install.interpreters import interpreter_python

ROOT = Path(__file__).resolve().parent.parent

START_SEED = 1000

BLOCKS = """
import dataclasses, json, sys, time
from pathlib import Path
import torch
from pytest_vlaeval.envs.pusht import make_env
from pytest_vlaeval.episodes.lockstep import SeparateEnvs, run_group
from pytest_vlaeval.lerobot.checkpoint import LeRobotCheckpoint
from pytest_vlaeval.policy.batched import PolicyEngine
from pytest_vlaeval.benchmark.model import resolve_benchmark

checkpoint, batched, start, episodes, steps, block, threads = sys.argv[1:]
torch.set_num_threads(int(threads))
benchmark = resolve_benchmark("pusht")[0]
task = dataclasses.replace(benchmark.tasks[0], max_steps=int(steps))
source = LeRobotCheckpoint(Path(checkpoint), "pusht", batched=batched == "batched")
engine = PolicyEngine(source, benchmark.env.action_dim)
policy_cpu = 0.0
act = engine.act


def timed_act(episodes, observations):
    global policy_cpu
    started = time.process_time()
    try:
        return act(episodes, observations)
    finally:
        policy_cpu += time.process_time() - started


engine.act = timed_act
envs = SeparateEnvs([make_env(task, benchmark, "auto") for _ in range(int(block))])
seeds = list(range(int(start), int(start) + int(episodes)))
episodes = {}
started, cpu = time.perf_counter(), time.process_time()
for first in range(0, len(seeds), int(block)):
    group = seeds[first : first + int(block)]
    outcomes = run_group(envs, engine, task=task.env_id, seeds=group, indices=[s - int(start) for s in group],
                         policy_obs_keys=benchmark.env.policy_obs_keys, reset_options=benchmark.env.reset_options)
    for seed, outcome in zip(group, outcomes, strict=True):
        if not hasattr(outcome, "success"):
            raise SystemExit(f"seed {seed}: {outcome}")
        episodes[seed] = [outcome.success, outcome.extras["max_reward"], outcome.episode_return, outcome.length]
wall, cpu = time.perf_counter() - started, time.process_time() - cpu
envs.close()
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "policy_cpu_s": policy_cpu, "episodes": episodes}))
"""
"""One column: the episodes in lockstep blocks, one row at a time or batched; JSON on its last line."""


def run_blocks(python: Path, checkpoint: Path, batched: bool, args: argparse.Namespace) -> dict:
    mode = "batched" if batched else "one"
    command = [str(python), "-c", BLOCKS, str(checkpoint), mode, str(START_SEED)]
    command += [str(args.episodes), str(args.steps), str(args.block), str(args.threads)]
    threads = str(args.threads)
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    done = subprocess.run(command, capture_output=True, text=True, env=environ, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} column failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def moved(one: dict, batched: dict) -> dict[str, float | int]:
    """What batching changed, episode by episode (same seeds)."""
    pairs = [(one[seed], batched[seed]) for seed in one]
    return {
        "successes": sum(a[0] for a, _ in pairs),
        "successes_batched": sum(b[0] for _, b in pairs),
        "flipped": sum(a[0] != b[0] for a, b in pairs),
        "max_reward_moved": sum(a[1] != b[1] for a, b in pairs),
        "max_reward_diff": max(abs(a[1] - b[1]) for a, b in pairs),
        "sum_moved": sum(a[2] != b[2] for a, b in pairs),
        "sum_diff": max(abs(a[2] - b[2]) for a, b in pairs),
        "sum_relative": max(
            (abs(a[2] - b[2]) / max(abs(a[2]), abs(b[2])) for a, b in pairs if a[2] or b[2]), default=0
        ),
        "length_moved": sum(a[3] != b[3] for a, b in pairs),
        "touched": sum(a[1] > 0 for a, _ in pairs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", nargs="+", choices=("act", "diffusion"), default=["act", "diffusion"])
    parser.add_argument("--episodes", type=int, default=200, help="Push-T episodes per column [200]")
    parser.add_argument("--steps", type=int, default=300, help="steps an episode at most [300, Push-T's]")
    parser.add_argument("--block", type=int, default=8, help="episodes stepped together (--vla-lockstep) [8]")
    parser.add_argument("--threads", type=int, default=1, help="torch's threads in both columns [1]")
    parser.add_argument("--smoke", action="store_true", help="one block of 16-step episodes: checks the script")
    args = parser.parse_args(argv)
    if args.smoke:
        args.episodes, args.steps = args.block, 16
    python = interpreter_python("lerobot")
    if not python.is_file():
        raise SystemExit(f"no LeRobot interpreter at {python}: run `vlaeval install lerobot`")
    print(
        f"Push-T, {args.episodes} episodes from seed {START_SEED}, at most {args.steps} steps, "
        f"lockstep blocks of {args.block}, torch on {args.threads} thread(s)\n"
    )
    speed = [
        "| policy | inference | wall s | CPU s | policy CPU s | episodes/s | speed-up: wall | CPU | policy CPU |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    digits = [
        "| policy | episodes | moved the block | successes (one / batched) | flipped | max reward moved | "
        "largest max-reward difference | sum moved | largest sum difference (relative) | length moved |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-lerobot-batching-") as tmp:
        for policy in args.policy:
            checkpoint = Path(tmp) / policy
            build = ["--env", "pusht", "--policy", policy, "--out", str(checkpoint)]
            subprocess.run(
                [str(python), str(ROOT / "tests" / "lerobot_checkpoints.py"), *build],
                check=True,
                capture_output=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            one, batched = (run_blocks(python, checkpoint, mode, args) for mode in (False, True))
            for name, column in (("one row at a time", one), ("batched", batched)):
                rate = args.episodes / column["wall_s"]
                speed.append(
                    f"| {policy} | {name} | {column['wall_s']:.1f} | {column['cpu_s']:.1f} | "
                    f"{column['policy_cpu_s']:.1f} | {rate:.3f} | {one['wall_s'] / column['wall_s']:.2f}x | "
                    f"{one['cpu_s'] / column['cpu_s']:.2f}x | {one['policy_cpu_s'] / column['policy_cpu_s']:.2f}x |"
                )
            m = moved(one["episodes"], batched["episodes"])
            digits.append(
                f"| {policy} | {args.episodes} | {m['touched']} | {m['successes']} / {m['successes_batched']} | "
                f"{m['flipped']} | {m['max_reward_moved']} | {m['max_reward_diff']:.3g} | {m['sum_moved']} | "
                f"{m['sum_diff']:.3g} ({m['sum_relative']:.2g}) | {m['length_moved']} |"
            )
    print("\n".join(speed))
    print()
    print("\n".join(digits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
