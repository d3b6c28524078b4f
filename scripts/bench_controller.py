"""What an episode costs the controller and the terminal as a run grows, beside a plain test.

No simulator: a benchmark of a few tasks whose episodes last two steps, evaluated with the
``zero`` policy (every episode fails, so pytest's failure bookkeeping is exercised too), in a
real pytest session per size, serial and under xdist. Each row also times a plain
parametrized test with as many items in the same kind of session. The cost per episode is
the session's wall time over its episodes, start-up included, so it is what a user waits for.

The sessions run in a memory-backed directory where there is one (``--where``): the run's log
is fsynced per episode, which on a shared or networked disk costs more than everything
measured here and says nothing about the controller.

With ``--one-episode-tasks`` every task has one episode (LIBERO-Plus has 10,030 such tasks), so
what a task's end costs is measured, and how it grows with the number of tasks.

    python scripts/bench_controller.py [--sizes 1000 5000 20000] [--workers 0 2] [--one-episode-tasks] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = 4
STEPS = 2
MEMORY_DIR = Path("/dev/shm")

BENCHMARK_YAML = """\
name: bench
title: Controller-Bench
version: "0"
benchmark_commit: null
env:
  factory: bench_env:make_env
  action_dim: 7
  policy_obs_keys: [state]
protocol:
  start_seed: 0
  episodes: 1
tasks:
{tasks}
"""

ENV_MODULE = '''\
"""Two steps, never a success: the controller's work, not the simulator's."""

import numpy as np

from pytest_vlaeval.envs.adapter import Adapter


class TwoStepEnv(Adapter):
    def __init__(self, task):
        self.max_episode_steps = task.max_steps
        self.render_backend = "none"

    def reset(self, *, seed, options):
        return {"state": np.zeros(7, np.float32)}, {"language_instruction": "wait", "success": False}

    def step(self, action):
        return {"state": np.zeros(7, np.float32)}, 0.0, False, False, {"success": False}

    def close(self):
        pass


def make_env(task, benchmark, render_request):
    return TwoStepEnv(task)
'''

PLAIN_TEST = """\
import pytest


@pytest.mark.parametrize("index", range({items}))
def test_item(index):
    assert index >= 0
"""


def write_projects(root: Path, tasks: int, episodes: int) -> tuple[Path, Path]:
    """Two directories: the benchmark of ``tasks`` tasks and its env module, and the plain test."""
    evaluation, plain = root / "evaluation", root / "plain"
    evaluation.mkdir()
    plain.mkdir()
    listed = "\n".join(f"  - {{env_id: Task{i}-v0, split: main, max_steps: {STEPS}}}" for i in range(tasks))
    (evaluation / "bench.yaml").write_text(BENCHMARK_YAML.format(tasks=listed))
    (evaluation / "bench_env.py").write_text(ENV_MODULE)
    (plain / "test_plain.py").write_text(PLAIN_TEST.format(items=episodes))
    return evaluation, plain


def timed_session(root: Path, args: list[str], expected: int) -> float:
    """Wall seconds of one pytest session in ``root`` (its output read and discarded, as a CI log would be)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != expected:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"pytest {' '.join(args)} exited {done.returncode}:\n" + "\n".join(tail))
    return elapsed


def measure(tasks: int, per_task: int, workers: int, where: Path | None, repeat: int) -> tuple[float, float]:
    """Seconds of an evaluation of ``tasks`` x ``per_task`` episodes and of a plain test of as many
    items, each the fastest of ``repeat`` sessions (the least disturbed by the rest of the machine)."""
    runs = [_measure_once(tasks, per_task, workers, where) for _ in range(repeat)]
    return min(run[0] for run in runs), min(run[1] for run in runs)


def _measure_once(tasks: int, per_task: int, workers: int, where: Path | None) -> tuple[float, float]:
    parallel = ["-n", str(workers)] if workers else ["-p", "no:xdist"]
    with tempfile.TemporaryDirectory(prefix="bench-controller-", dir=where) as tmp:
        evaluation_dir, plain_dir = write_projects(Path(tmp), tasks, per_task * tasks)
        evaluation = timed_session(
            evaluation_dir,
            [
                "--benchmark=bench.yaml",
                "--policy=zero",
                f"--episodes={per_task}",
                "--vla-results=results",
                "--vla-render=cpu",
                *parallel,
            ],
            expected=1,  # every episode fails
        )
        plain = timed_session(plain_dir, ["test_plain.py", *parallel], expected=0)
    return evaluation, plain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000], help="episodes per session")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[0, 2], help="xdist workers per session (0: serial, no xdist)"
    )
    parser.add_argument(
        "--where",
        type=Path,
        default=MEMORY_DIR if MEMORY_DIR.is_dir() else None,
        help="where the sessions run [%(default)s]",
    )
    parser.add_argument(
        "--one-episode-tasks", action="store_true", help=f"as many tasks as episodes, one each [{TASKS} tasks]"
    )
    parser.add_argument("--repeat", type=int, default=3, help="sessions per measurement, the fastest kept [3]")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, serial only: checks that the script works")
    args = parser.parse_args(argv)
    sizes, modes = ([8, 16], [0]) if args.smoke else (args.sizes, args.workers)
    shape = "one-episode tasks" if args.one_episode_tasks else f"{TASKS} tasks"
    print(f"{shape}, {STEPS}-step episodes, zero policy; ms per episode = session wall time / episodes")
    print("past start: (wall time - a one-episode session's) / episodes, what each episode adds")
    header = (
        f"{'mode':>6} {'episodes':>9} {'eval s':>8} {'ms/ep':>7} {'plain s':>8} {'ms/item':>8} {'vs plain':>9} "
        f"{'vs first':>9} {'past start':>11} {'vs first':>9}"
    )
    print(header)
    for workers in modes:
        first = first_past_start = None
        start, _ = measure(1, 1, workers, args.where, args.repeat)
        for size in sizes:
            tasks = size if args.one_episode_tasks else TASKS
            per_task = max(1, size // tasks)
            evaluation, plain = measure(tasks, per_task, workers, args.where, 1 if args.smoke else args.repeat)
            n = per_task * tasks
            per_episode, per_item = 1000 * evaluation / n, 1000 * plain / n
            past_start = 1000 * (evaluation - start) / n
            first = first or per_episode
            first_past_start = first_past_start or past_start
            mode = f"-n {workers}" if workers else "serial"
            print(
                f"{mode:>6} {n:>9} {evaluation:>8.1f} {per_episode:>7.2f} {plain:>8.1f} {per_item:>8.2f} "
                f"{per_episode / per_item:>8.2f}x {per_episode / first:>8.2f}x {past_start:>11.2f} "
                f"{past_start / first_past_start:>8.2f}x",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
