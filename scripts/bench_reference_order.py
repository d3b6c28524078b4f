#!/usr/bin/env python
"""How much MIKASA's reference runner depends on episode order (a measurement, not a test).

Per task, the benchmark's own runner code, twice, with the same policy and seeds: as shipped
(``evaluate_task``: one env for the task, its seeds in order, plain resets), and with a fresh env
for each episode (``make_benchmark_env`` and ``run_episode`` per seed, which is what every seed
gets under the plugin's reconfiguring resets). Prints, per task and policy, the seeds whose
success flips, whose length changes, and whose return moves (more than 1e-6), with the largest
move. ``--jobs`` processes share the work: a task's shipped order is one job (one env, never
split), each fresh episode its own; a task's row prints as it completes.

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
import dataclasses
import functools
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


@dataclasses.dataclass(frozen=True)
class Unit:
    """A worker's share: one task and policy, either the shipped order over all seeds (one env, so
    never split) or one seed on a fresh env (independent, so these spread over the workers)."""

    task: str
    policy: str
    order: str  # "shipped" or "fresh"
    seeds: int  # the shipped unit's number of seeds
    index: int = 0  # the fresh unit's seed, counted from the protocol's first


_backend: str | None = None
_current: dict[str, Any] = {}
"""The policy of the unit in progress, for the env factory to hand its env to."""


def prepare(render_request: str) -> None:
    """Each worker process, at its first unit (not as the pool's initializer, whose failure the pool
    would answer by starting another worker, forever): the render backend and the benchmark's env factory made to build
    with it, and to hand the env it builds to the policy (the scripted policy reads its state)."""
    global _backend
    from pytest_vlaeval.envs import render, vulkan
    from pytest_vlaeval.envs.mikasa import _never_prompt_for_downloads

    _backend = render.resolve_backend(render_request)
    vulkan.set_backend_env(_backend)
    if _backend == "cpu":
        vulkan.apply_cpu_patches()
    import gymnasium as gym

    _never_prompt_for_downloads()
    from mikasa_robo_suite.vla import benchmarking

    make = gym.make
    gym.make = lambda name, **kwargs: make(name, **{**kwargs, **vulkan.make_kwargs(_backend)})
    make_env = benchmarking.make_benchmark_env

    def make_and_show(*args: Any, **kwargs: Any) -> Any:
        _current["policy"].env = make_env(*args, **kwargs)  # evaluate_task builds its env through this name
        return _current["policy"].env

    benchmarking.make_benchmark_env = make_and_show


def measure(unit: Unit, render_request: str) -> dict[str, Any]:
    """One unit: per episode, (success, length, return)."""
    if _backend is None:
        prepare(render_request)
    from mikasa_robo_suite.vla import benchmarking

    from pytest_vlaeval.benchmark.model import resolve_benchmark
    from pytest_vlaeval.envs import vulkan

    spec, _ = resolve_benchmark("mikasa")
    task = spec.task(unit.task)
    memory = task.group(next(axis for axis in spec.axes if axis.field == "memory_type"))
    config = benchmarking.BenchmarkConfig(
        n_episodes=unit.seeds, sim_backend=vulkan.make_kwargs(_backend)["sim_backend"]
    )
    policy = _current["policy"] = POLICIES[unit.policy]()
    started = time.perf_counter()
    if unit.order == "shipped":
        policy.start(unit.task, config.start_seed)
        shipped = benchmarking.evaluate_task(
            benchmarking.BenchmarkTask(unit.task, task.split, memory, task.max_steps, "", ""),
            policy,
            config,
            episode_callback=lambda i, _: policy.start(unit.task, config.start_seed + i + 1),
        )
        episodes = list(zip(shipped["successes"], shipped["episode_lengths"], shipped["returns"], strict=True))
    else:
        seed = config.start_seed + unit.index
        env = benchmarking.make_benchmark_env(unit.task, config)
        try:
            policy.start(unit.task, seed)
            result, _ = benchmarking.run_episode(env, policy, seed)
        finally:
            env.close()
        episodes = [(result.success_once, result.n_steps, result.episode_return)]
    return {
        "unit": unit,
        "memory_type": memory,
        "backend": _backend,
        "episodes": episodes,
        "seconds": time.perf_counter() - started,
    }


def units(tasks: list[str], seeds: int, policies: list[str], with_fresh: bool) -> list[Unit]:
    """Every task's units, the long shipped ones first so that the fresh ones fill in beside them."""
    pairs = [(t, p) for t in tasks for p in policies if p != "scripted" or t.startswith(SCRIPTED_TASKS)]
    shipped = [Unit(t, p, "shipped", seeds) for t, p in pairs]
    fresh = [Unit(t, p, "fresh", seeds, i) for t, p in pairs for i in range(seeds)] if with_fresh else []
    return shipped + fresh


class Collected:
    """Units' results gathered back into per-task results, the JSON file's shape: ``[{"task",
    "memory_type", "backend", "seconds", "policies": {name: {"shipped": [...], "fresh": [...]}}}]``
    with each list in seed order."""

    def __init__(self, with_fresh: bool) -> None:
        self.with_fresh = with_fresh
        self.tasks: dict[str, dict[str, Any]] = {}
        self.shipped: dict[tuple[str, str], list[Any]] = {}
        self.fresh: dict[tuple[str, str], dict[int, Any]] = {}

    def add(self, result: dict[str, Any]) -> str | None:
        """Take one unit's result; the policy's name once its task has both orders complete."""
        unit: Unit = result["unit"]
        task = self.tasks.setdefault(
            unit.task,
            {"task": unit.task, "memory_type": result["memory_type"], "backend": result["backend"], "seconds": 0.0},
        )
        task["seconds"] = round(task["seconds"] + result["seconds"], 1)
        key = (unit.task, unit.policy)
        fresh = self.fresh.setdefault(key, {})
        if unit.order == "shipped":
            self.shipped[key] = result["episodes"]
        else:
            fresh[unit.index] = result["episodes"][0]
        complete = key in self.shipped and (not self.with_fresh or len(fresh) == unit.seeds)
        return unit.policy if complete else None

    def results(self) -> list[dict[str, Any]]:
        return [
            {**task, "policies": {
                policy: {"shipped": self.shipped.get((name, policy)), "fresh": [f[i] for i in sorted(f)]}
                for (of, policy), f in self.fresh.items() if of == name
            }}
            for name, task in self.tasks.items()
        ]  # fmt: skip

    def result(self, task: str) -> dict[str, Any]:
        return next(r for r in self.results() if r["task"] == task)


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
    parser.add_argument(
        "--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="worker processes [half the cores]"
    )
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
    work = units(tasks, seeds, policies, not args.shipped_only)
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
    collected = Collected(with_fresh=not args.shipped_only)
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(args.jobs, len(work))) as pool:
        # Each task's row as it completes, and the file rewritten: a long run stopped early keeps them.
        for result in pool.imap_unordered(functools.partial(measure, render_request=args.render), work):
            policy = collected.add(result)
            if args.json:
                Path(args.json).write_text(json.dumps(collected.results()))
            if policy and not args.shipped_only:
                print(row(collected.result(result["unit"].task), policy), flush=True)
    results = collected.results()
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
