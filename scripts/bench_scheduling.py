#!/usr/bin/env python
"""Wall time and env builds of the same MIKASA-Robo-VLA episodes under each way of running them.

Runs the episode set (default: 4 short tasks x 6 seeds, random policy) as pytest sessions under
``-n WORKERS`` with ``--dist load``, ``--dist worksteal`` and the plugin's affinity scheduler,
and serially through the benchmark package's reference runner (``evaluate_task``, one env per
task), then prints one table with the ratios. Every row is a fresh process timed from start to
exit, so imports, worker start-up and the render check count everywhere they happen. Env builds
come from the ``env_built`` flag of each episode record. The machine's load moves single
timings; compare ratios within one run (``--repeat`` takes the median of several). The "in
episodes" column (seconds inside episodes, summed over workers) and the load average show how
much the machine slowed each row: the same work costs more seconds on a busier machine. Where
a pytest row's time goes: "to first" is the session's start to its first episode's start
(imports, the render check, starting and collecting on the workers), "builds" the seconds env
builds added (a task's first episode on a worker less that task's median later episode), and
"ideal" what the row's episode seconds would take spread evenly over the workers.

    python scripts/bench_scheduling.py [--tasks A,B,...] [--episodes 6] [--workers 2] [--repeat 1] [--keep DIR]
    python scripts/bench_scheduling.py --smoke   (one task, 2 seeds, the reference and the affinity row, at once)

Not a test: it takes minutes on a CPU (software Vulkan) machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

TASKS = ("RememberColor3-VLA-v0", "RememberShape3-VLA-v0", "FindImposterColor3-VLA-v0", "InterceptSlow-VLA-v0")
MODES = {"--dist load": ["--dist", "load"], "--dist worksteal": ["--dist", "worksteal"], "affinity (default)": []}
REFERENCE = "reference runner, serial"

Outcomes = dict[tuple[str, int], tuple[bool, int, float]]
"""(task, seed) -> (success, length, return rounded to 6 places): what must agree across rows."""


@dataclass
class Row:
    name: str
    walls: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    """The machine's 1-minute load average at the end of each run: how noisy its timing is."""
    costs: list[Costs] = field(default_factory=list)
    """Where each pytest run's time went (none for the reference runner, which writes no records)."""
    builds: int = 0
    outcomes: Outcomes = field(default_factory=dict)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    def add(self, wall: float, builds: int, outcomes: Outcomes, costs: Costs | None) -> None:
        self.walls.append(wall)
        self.loads.append(os.getloadavg()[0])
        if costs is not None:
            self.costs.append(costs)
        self.builds, self.outcomes = builds, outcomes


@dataclass(frozen=True)
class Costs:
    """A pytest session's seconds, from its episode records: inside episodes (summed over
    workers), from its start to its first episode, and added by env builds."""

    in_episodes: float
    to_first: float
    builds: float

    @classmethod
    def of(cls, records: list[dict], started: float) -> Costs:
        def start(record: dict) -> float:
            return datetime.fromisoformat(record["time"]).timestamp() - record["wall_time"]

        later = defaultdict(list)
        for record in records:
            if not record["env_built"]:
                later[record["task"]].append(record["wall_time"])
        added = sum(
            r["wall_time"] - statistics.median(later[r["task"]]) for r in records if r["env_built"] and later[r["task"]]
        )
        return cls(sum(r["wall_time"] for r in records), min(map(start, records)) - started, added)


def run_pytest(
    mode: list[str], tasks: list[str], episodes: int, workers: int, workdir: Path
) -> tuple[float, int, Outcomes, Costs]:
    """One pytest session in a fresh directory: (wall seconds, env builds, outcomes, where the time went)."""
    workdir.mkdir(parents=True)
    command = [
        sys.executable, "-m", "pytest", "--benchmark=short", f"--vla-tasks={','.join(tasks)}",
        f"--episodes={episodes}", "-n", str(workers), *mode, "--vla-results=results",
        "-p", "no:cacheprovider", "-q", "--rootdir", str(workdir),
    ]  # fmt: skip
    started, epoch = time.perf_counter(), time.time()
    proc = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # 1: some episodes failed, which is a result
        sys.exit(f"pytest {' '.join(mode)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    records = [
        json.loads(line)
        for log in sorted(workdir.glob("results/*/episodes/*.jsonl"))
        for line in log.read_text().splitlines()
    ]
    errors = [r for r in records if r["outcome"] == "error"]
    if errors:
        sys.exit(f"pytest {' '.join(mode)}: {len(errors)} episodes errored, e.g. {errors[0]['message']}")
    outcomes = {(r["task"], r["seed"]): (r["success"], r["length"], round(r["episode_return"], 6)) for r in records}
    return wall, sum(bool(r["env_built"]) for r in records), outcomes, Costs.of(records, epoch)


def run_reference(tasks: list[str], episodes: int) -> tuple[float, int, Outcomes, None]:
    """This script again, in ``--reference`` mode: a fresh process, as for the pytest rows."""
    command = [sys.executable, __file__, "--reference", f"--tasks={','.join(tasks)}", f"--episodes={episodes}"]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"reference runner exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    outcomes = {
        (result["env_id"], seed): (success, length, round(ret, 6))
        for result in results
        for seed, success, length, ret in zip(
            result["episode_seeds"], result["successes"], result["episode_lengths"], result["returns"], strict=True
        )
    }
    return wall, len(results), outcomes, None


def reference_main(tasks: list[str], episodes: int) -> None:
    """``evaluate_task`` for each task with the plugin's random policy, reseeded per episode
    exactly as the plugin does; prints the per-task results as one JSON line."""
    from pytest_vlaeval.envs import render, vulkan

    backend = render.resolve_backend("auto")
    vulkan.set_backend_env(backend)
    if backend == "cpu":
        vulkan.apply_cpu_patches()
    import gymnasium as gym
    import mikasa_robo_suite.vla.memory_envs  # noqa: F401  (registers the env ids)
    from mikasa_robo_suite.vla import benchmarking

    from pytest_vlaeval.benchmark.model import resolve_benchmark
    from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy

    # The reference's make_benchmark_env asks for the default (CUDA) render device; the one
    # change the CPU path needs is naming the backend, as the plugin's env factory does.
    make = gym.make
    gym.make = lambda env_id, **kwargs: make(env_id, **{**kwargs, **vulkan.make_kwargs(backend)})

    class ReferencePolicy:
        """The plugin's random policy behind the reference runner's ``forward`` interface."""

        def __init__(self) -> None:
            self.policy = RandomPolicy()
            self.chunk_size = self.policy.chunk_size

        def start(self, task: str, seed: int) -> None:
            self.policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=0))

        def forward(self, obs):
            return benchmarking.torch.as_tensor(self.policy.act(obs))

    config = benchmarking.BenchmarkConfig(n_episodes=episodes, sim_backend=backend)

    def evaluate(task: benchmarking.BenchmarkTask) -> dict:
        policy = ReferencePolicy()
        policy.start(task.env_id, config.start_seed)
        return benchmarking.evaluate_task(
            task, policy, config, episode_callback=lambda i, _: policy.start(task.env_id, config.start_seed + i + 1)
        )

    # The wheel lacks the task table select_benchmark_tasks reads; the same rows are in our benchmark file.
    spec, _ = resolve_benchmark("mikasa:short")
    rows = [spec.task(env_id) for env_id in tasks]
    memory = next(axis for axis in spec.axes if axis.field == "memory_type")
    print(
        json.dumps(
            [
                evaluate(benchmarking.BenchmarkTask(t.env_id, t.split, t.group(memory), t.max_steps, t.instruction, ""))
                for t in rows
            ]
        )
    )


def table(rows: list[Row], tasks: list[str], episodes: int, workers: int, reference: Row) -> str:
    best_builtin = min((row.wall for row in rows if row.name.startswith("--dist")), default=None)
    lines = [
        f"{len(tasks)} tasks x {episodes} seeds = {len(tasks) * episodes} episodes; pytest rows under -n {workers}",
        f"{'':<26}{'wall [s]':>9}{'env builds':>12}{'episodes/s':>12}{'x reference':>13}{'x best built-in':>17}"
        f"{'in episodes [s]':>17}{'to first [s]':>14}{'builds [s]':>12}{'ideal [s]':>11}{'load':>6}",
    ]
    for row in [reference, *rows]:
        speedup = reference.wall / row.wall
        versus = "" if row is reference or best_builtin is None else f"{best_builtin / row.wall:.2f}"
        busy, to_first, builds, ideal = (
            (
                f"{statistics.median(c.in_episodes for c in row.costs):.1f}",
                f"{statistics.median(c.to_first for c in row.costs):.1f}",
                f"{statistics.median(c.builds for c in row.costs):.1f}",
                f"{statistics.median(c.in_episodes for c in row.costs) / workers:.1f}",
            )
            if row.costs
            else ("-",) * 4
        )
        lines.append(
            f"{row.name:<26}{row.wall:>9.1f}{row.builds:>12}{len(row.outcomes) / row.wall:>12.3f}"
            f"{speedup:>13.2f}{versus:>17}{busy:>17}{to_first:>14}{builds:>12}{ideal:>11}"
            f"{statistics.median(row.loads):>6.1f}"
        )
    same = all(row.outcomes == reference.outcomes for row in rows)
    lines.append(f"every row gives the same success, length and return per episode: {'yes' if same else 'NO'}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated short-split env ids")
    parser.add_argument("--episodes", type=int, default=6, help="seeds per task [6]")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers for the pytest rows [2]")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the median wall time is shown [1]")
    parser.add_argument("--keep", type=Path, help="keep each run's directory (results, episode records) under this one")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one task, 2 seeds, only the reference and affinity rows, at once: does it run",
    )
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    modes = MODES
    if args.smoke:
        tasks, args.episodes, modes = tasks[:1], 2, {"affinity (default)": []}
    if args.reference:
        reference_main(tasks, args.episodes)
        return

    reference = Row(REFERENCE)
    rows = [Row(name) for name in modes]
    # One process at a time, so that none moves another's wall time; --smoke compares no timing,
    # so its rows run at once.
    with (
        tempfile.TemporaryDirectory(prefix="bench-scheduling-") as scratch,
        ThreadPoolExecutor(1 + len(rows) if args.smoke else 1) as starter,
    ):
        for attempt in range(args.repeat):
            runs = [starter.submit(run_reference, tasks, args.episodes)]
            for number, row in enumerate(rows):
                workdir = (args.keep or Path(scratch)) / f"{attempt}-{number}"
                runs.append(starter.submit(run_pytest, modes[row.name], tasks, args.episodes, args.workers, workdir))
            reference.add(*runs[0].result())
            print(f"[{attempt + 1}/{args.repeat}] {REFERENCE}: {reference.walls[-1]:.1f} s", file=sys.stderr)
            for row, run in zip(rows, runs[1:], strict=True):
                row.add(*run.result())
                print(
                    f"[{attempt + 1}/{args.repeat}] {row.name}: {row.walls[-1]:.1f} s, {row.builds} builds",
                    file=sys.stderr,
                )
    print(table(rows, tasks, args.episodes, args.workers, reference))


if __name__ == "__main__":
    main()
