#!/usr/bin/env python
"""How much MIKASA's reference runner depends on episode order (a measurement, not a test).

Per task, the benchmark's own runner code, twice, with the same policy and seeds: as shipped
(``evaluate_task``: one env for the task, its seeds in order, plain resets), and with a fresh env
for each episode (``make_benchmark_env`` and ``run_episode`` per seed, which is what every seed
gets under the plugin's reconfiguring resets). Prints, per task and policy, the seeds whose
success flips, whose length changes, and whose return moves (more than 1e-6), with the largest
move. Tasks run in parallel processes (``--jobs``); each task's rows print as it finishes.

Policies: ``observed``, a fixed random linear map of the two cameras' mean colours and the
proprioception (deterministic, a function of the observation alone); ``random``, the plugin's
random policy reseeded per episode; ``scripted``, which reaches for the goal cube from the
simulator's state with seeded noise and succeeds sometimes (RememberColor and FindImposterColor
tasks only), so that success flips can show.

    python scripts/bench_reference_order.py [--tasks A,B] [--seeds 10] [--policies observed,scripted,random]
        [--render auto|gpu|gpu-render|cpu] [--jobs N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

SAMPLE = (
    "RememberColor3-VLA-v0",  # Object
    "FindImposterColor3-VLA-v0",  # Negative
    "InterceptSlow-VLA-v0",  # Spatial: a rolling ball
    "TakeItBack-VLA-v0",  # Spatial: pushing, contact
    "BlinkCountButtonPressEasy-VLA-v0",  # Temporal
    "GatherAndRecall1-VLA-v0",  # Prospective
    "TraceShapeEasy-VLA-v0",  # Procedural
    "BunchOfColors3-VLA-v0",  # Capacity: many cubes in contact
    "ChainOfColors3-VLA-v0",  # Sequential
    "BatteriesCheckerEasy-3-VLA-v0",  # Checklist
)
"""Every memory type but Tracking, whose tasks (the ShellGames) need ManiSkill's YCB pack from the
internet, and the contact-rich families."""
SMOKE_TASKS = ("RememberColor3-VLA-v0",)
MOVED = 1e-6


class ObservedPolicy:
    """A deterministic function of the observation: tanh of a fixed linear map of the cameras'
    mean colours and the proprioception."""

    chunk_size = 1

    def __init__(self) -> None:
        import numpy as np

        self.weights = np.random.default_rng(0).normal(0, 2.0, (7, 13))

    def start(self, task: str, seed: int) -> None:
        pass

    def forward(self, obs: dict[str, Any]) -> Any:
        import numpy as np
        import torch

        rgb = obs["rgb"].float().mean(dim=(0, 1, 2)).cpu().numpy() / 255.0
        proprio = obs["proprio"].float().reshape(-1).cpu().numpy()
        return torch.as_tensor(np.tanh(self.weights @ np.concatenate([rgb, proprio])), dtype=torch.float32)


class Observed(ObservedPolicy):
    """The same policy under the plugin's contract (``--policy=bench_reference_order:Observed``)."""

    def reset(self, episode: Any) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> Any:
        return self.forward(obs)


class RandomReference:
    """The plugin's random policy, reseeded per episode as the plugin does."""

    def __init__(self) -> None:
        from pytest_vlaeval.policy import RandomPolicy

        self.policy = RandomPolicy()
        self.chunk_size = self.policy.chunk_size

    def start(self, task: str, seed: int) -> None:
        from pytest_vlaeval.policy import EpisodeInfo

        self.policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=0))

    def forward(self, obs: dict[str, Any]) -> Any:
        import torch

        return torch.as_tensor(self.policy.act(obs))


class ScriptedReference:
    """Moves the tool centre point to the cube the task asks for, read from the simulator's state
    (privileged, so for this measurement only: never a policy under evaluation), stops within 4 cm so
    the arm comes to rest, with noise seeded per episode so that it succeeds only sometimes. For the
    tasks whose env keeps the gap to the goal cube (``SCRIPTED_TASKS``)."""

    chunk_size = 1
    NOISE = 0.15
    env: Any = None
    """The env the episode runs in (set where the runner builds it)."""

    def start(self, task: str, seed: int) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)

    def forward(self, obs: dict[str, Any]) -> Any:
        import numpy as np
        import torch

        gap = self.env.unwrapped.obj_to_goal_pos[0].cpu().numpy()
        action = np.zeros(7)
        if 0.04 < np.linalg.norm(gap) < 1.0:  # 1 m or more: the cubes are hidden (moved away) in the cue
            action[:3] = np.clip(0.5 * gap / 0.1, -1, 1)  # pd_ee_delta_pose: 1 = 10 cm a step
        action[:6] += self.rng.normal(0, self.NOISE, 6)
        return torch.as_tensor(np.clip(action, -1, 1), dtype=torch.float32)


POLICIES = {"observed": ObservedPolicy, "random": RandomReference, "scripted": ScriptedReference}
SCRIPTED_TASKS = ("RememberColor", "FindImposterColor")
"""Env id prefixes whose envs the scripted policy can read; it is skipped on other tasks."""


def measure(job: tuple[str, int, list[str], str, bool]) -> dict[str, Any]:
    """One task, in its own process: both orders for each policy."""
    env_id, seeds, policies, render_request, with_fresh = job
    from pytest_vlaeval.envs import render
    from pytest_vlaeval.envs.mikasa import _never_prompt_for_downloads

    backend = render.resolve_backend(render_request)
    render.set_backend_env(backend)
    if backend == "cpu":
        render.apply_cpu_patches()
    import gymnasium as gym

    _never_prompt_for_downloads()
    from mikasa_robo_suite.vla import benchmarking

    from pytest_vlaeval.spec import resolve_benchmark

    make = gym.make
    gym.make = lambda name, **kwargs: make(name, **{**kwargs, **render.make_kwargs(backend)})
    spec, _ = resolve_benchmark("mikasa")
    task = spec.task(env_id)
    memory = next(axis for axis in spec.axes if axis.field == "memory_type")
    reference_task = benchmarking.BenchmarkTask(env_id, task.split, task.group(memory), task.max_steps, "", "")
    config = benchmarking.BenchmarkConfig(n_episodes=seeds, sim_backend=render.make_kwargs(backend)["sim_backend"])
    started = time.perf_counter()
    out: dict[str, Any] = {"task": env_id, "memory_type": task.group(memory), "backend": backend, "policies": {}}
    policy: Any = None
    make_env = benchmarking.make_benchmark_env

    def make_and_show(*args: Any, **kwargs: Any) -> Any:
        policy.env = make_env(*args, **kwargs)  # evaluate_task builds its env through this name
        return policy.env

    benchmarking.make_benchmark_env = make_and_show
    for name in policies:
        if name == "scripted" and not env_id.startswith(SCRIPTED_TASKS):
            continue
        policy = POLICIES[name]()
        policy.start(env_id, config.start_seed)
        shipped = benchmarking.evaluate_task(
            reference_task,
            policy,
            config,
            episode_callback=lambda i, _, p=policy: p.start(env_id, config.start_seed + i + 1),
        )
        fresh = []
        for i in range(seeds if with_fresh else 0):
            env = benchmarking.make_benchmark_env(env_id, config)
            try:
                policy.start(env_id, config.start_seed + i)
                result, _ = benchmarking.run_episode(env, policy, config.start_seed + i)
            finally:
                env.close()
            fresh.append((result.success_once, result.n_steps, result.episode_return))
        out["policies"][name] = {
            "shipped": list(zip(shipped["successes"], shipped["episode_lengths"], shipped["returns"], strict=True)),
            "fresh": fresh,
        }
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def row(result: dict[str, Any], policy: str) -> str:
    shipped, fresh = result["policies"][policy]["shipped"], result["policies"][policy]["fresh"]
    flips = sum(a[0] != b[0] for a, b in zip(shipped, fresh, strict=True))
    lengths = sum(a[1] != b[1] for a, b in zip(shipped, fresh, strict=True))
    moves = [abs(a[2] - b[2]) for a, b in zip(shipped, fresh, strict=True)]
    moved = sum(m > MOVED for m in moves)
    srs = f"{sum(a[0] for a in shipped)}/{len(shipped)} vs {sum(b[0] for b in fresh)}/{len(fresh)}"
    return (
        f"| {result['task']} | {result['memory_type']} | {policy} | {srs} | {flips} | {lengths} | "
        f"{moved} | {max(moves):.3g} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", default=",".join(SAMPLE), help="comma-separated env ids [a sample of every memory type]"
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds per task, from the protocol's start [10]")
    parser.add_argument("--policies", default="observed,scripted", help=f"of {', '.join(POLICIES)} [observed,scripted]")
    parser.add_argument("--render", default="auto", help="the render backend, as --vla-render [auto]")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="tasks at once")
    parser.add_argument("--json", help="also write the per-episode results to this file")
    parser.add_argument("--shipped-only", action="store_true", help="only the shipped order (no table)")
    parser.add_argument("--smoke", action="store_true", help="one task, 2 seeds, the observed policy")
    args = parser.parse_args()
    tasks = list(SMOKE_TASKS) if args.smoke else [t.strip() for t in args.tasks.split(",") if t.strip()]
    seeds = 2 if args.smoke else args.seeds
    policies = ["observed"] if args.smoke else [p.strip() for p in args.policies.split(",")]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)}; valid: {', '.join(POLICIES)}")
    jobs = [(task, seeds, policies, args.render, not args.shipped_only) for task in tasks]
    started = time.perf_counter()
    if not args.shipped_only:
        print(
            f"{len(tasks)} tasks x {seeds} seeds; shipped = evaluate_task (one env, seeds in order, plain resets), "
            "fresh = a new env per episode",
            flush=True,
        )
        print(
            "| task | memory type | policy | successes shipped vs fresh | success flips | length changes "
            "| returns moved | largest move |\n|---|---|---|---|---:|---:|---:|---:|",
            flush=True,
        )
    results = []
    with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(jobs))) as pool:
        # Each task's rows as it finishes, and the file rewritten: a long run stopped early keeps them.
        for result in pool.imap_unordered(measure, jobs):
            results.append(result)
            if args.json:
                Path(args.json).write_text(json.dumps(results))
            if not args.shipped_only:
                print(*(row(result, policy) for policy in result["policies"]), sep="\n", flush=True)
    if args.shipped_only:
        return 0
    pairs = [
        pair for r in results for p in r["policies"].values() for pair in zip(p["shipped"], p["fresh"], strict=True)
    ]
    print(
        f"success flips in all: {sum(a[0] != b[0] for a, b in pairs)} of {len(pairs)} episodes; "
        f"render {results[0]['backend']}, {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
