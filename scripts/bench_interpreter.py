"""What running a benchmark's workers in an interpreter of their own costs: session start-up and
the cost per episode, the same interpreter beside another one, side by side in one run.

The fake two-step benchmark of ``bench_controller.py`` (no simulator: the harness's own cost),
under ``-n 2``, evaluated with the ``zero`` policy; once as is and once declaring
``install.own_interpreter``, whose workers then start in a second virtual env over this env's packages
(``tests/helpers.make_interpreter``: its own prefix, the same code). Start-up is a one-episode
session's wall time; the cost per episode is (a large session's - a one-episode session's) /
its episodes. Each number is the fastest of ``--repeat`` sessions.

    python scripts/bench_interpreter.py [--episodes 2000] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from bench_controller import MEMORY_DIR, TASKS, timed_session, write_projects  # noqa: E402
from helpers import make_interpreter  # noqa: E402

from pytest_vlaeval.install.interpreters import INTERPRETER_DIR_ENV  # noqa: E402


def session(episodes_per_task: int, other: bool, where: Path | None) -> float:
    """Wall seconds of one ``-n 2`` session of ``TASKS`` x ``episodes_per_task`` episodes."""
    with tempfile.TemporaryDirectory(prefix="bench-interpreter-", dir=where) as tmp:
        root = Path(tmp)
        evaluation, _ = write_projects(root, TASKS, 1)
        if other:
            make_interpreter(root / "interpreters" / "benchsim")
            spec = evaluation / "bench.yaml"
            spec.write_text(spec.read_text() + "install: {stack: benchsim, own_interpreter: true}\n")
        os.environ[INTERPRETER_DIR_ENV] = str(root / "interpreters")
        args = ["--benchmark=bench.yaml", "--policy=zero", f"--episodes={episodes_per_task}", "-n", "2"]
        return timed_session(evaluation, [*args, "--vla-results=results", "--vla-render=cpu"], expected=1)


def fastest(repeat: int, *args: object) -> float:
    return min(session(*args) for _ in range(repeat))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes of the large session [2000]")
    parser.add_argument("--repeat", type=int, default=3, help="sessions per number, the fastest kept [3]")
    parser.add_argument("--smoke", action="store_true", help="a tiny session, once: checks that the script works")
    args = parser.parse_args(argv)
    where = MEMORY_DIR if MEMORY_DIR.is_dir() else None
    episodes, repeat = (16, 1) if args.smoke else (args.episodes, args.repeat)
    per_task = max(1, episodes // TASKS)
    print(f"{TASKS} tasks, two-step episodes, zero policy, -n 2; the fastest of {repeat} sessions each")
    print(f"{'workers in':>22} {'start-up s':>11} {f'{per_task * TASKS} episodes s':>16} {'ms/episode':>11}")
    rows = {}
    for other in (False, True):
        start = fastest(repeat, 1, other, where)
        large = fastest(repeat, per_task, other, where)
        per_episode = 1000 * (large - start) / (per_task * TASKS - TASKS)
        rows[other] = (start, per_episode)
        label = "another interpreter" if other else "the same interpreter"
        print(f"{label:>22} {start:>11.2f} {large:>16.2f} {per_episode:>11.3f}", flush=True)
    (same_start, same_episode), (other_start, other_episode) = rows[False], rows[True]
    print(
        f"another interpreter: start-up {other_start - same_start:+.2f} s, "
        f"per episode {other_episode / same_episode:.2f}x the same interpreter's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
