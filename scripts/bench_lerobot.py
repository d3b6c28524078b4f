"""A LeRobot checkpoint through ``lerobot-eval`` and through this plugin, side by side in one run:
episodes per second and start-up on the same Push-T episodes, as a table to paste into the docs.

The checkpoint is built here (``tests/lerobot_checkpoints.py``: random weights, LeRobot's own API)
in LeRobot's interpreter (``vlaeval install lerobot``). Each row is one whole command, start-up
included, on the same seeds (1000 on):

- ``lerobot-eval`` at ``--eval.batch_size=1``, and at each of ``--batch-sizes`` (0: its automatic
  size), the fastest of all shown as its best; it renders its first 10 episodes to video whatever
  its flags;
- ``pytest --policy=lerobot:DIR`` under ``-n 1`` and ``-n 2``, the policy beside the env in each
  worker (the default where LeRobot's interpreter holds the benchmark), ``-n 2`` recording every
  episode's video (``--vla-video=all``, more than lerobot-eval's 10), ``-n 2`` served from one
  process (``--vla-policy-placement=served``, the path before the policy ran beside the env), and
  ``--vla-lockstep=8`` with batched inference (``lerobot:DIR:batched``);
- any ``--row "ARGS"`` given: one more row of ours with those pytest arguments.

Every row of ours loads the pytest plugins of a bare install of this package, its own and xdist's
(``BARE_INSTALL``), in the controller and the workers, not whatever this repository's environment
holds (its test extra's hypothesis, pytest-html, pytest-metadata, pytest-timeout and typeguard
cost about half a second in every process of a session; LeRobot's stack's anyio, platformdirs and
hydra-core plugins, which a user's workers load, about 0.6 s more).

Start-up is the time to the first step: for ``lerobot-eval`` its wall time less its ``eval_s`` (the
rollouts alone); for ours the first episode's end less the command's start and a typical (median)
episode's time. The load average before and after says how quiet the machine was: the numbers are
only comparable on a quiet one. A small VM's speed drifts by tens of percent within minutes, so
``--rounds N`` runs every row N times, a round being every row once (drift then falls on every row
alike), and shows each row's median and the range of its walls.

    python scripts/bench_lerobot.py [--policy act|diffusion] [--episodes 16] [--batch-sizes 2,4,8,16,0]
                                    [--row "-n 2 --vla-lockstep=4"] [--rounds 1] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_vlaeval.install.interpreters import interpreter_python

ROOT = Path(__file__).resolve().parent.parent
START_SEED = 1000
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1"}
BARE_INSTALL = {**OFFLINE, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The environment of our rows, with ``BARE_PLUGINS``: pytest loads only the plugins named, in the
controller and, inheriting it, the workers."""
BARE_PLUGINS = ["-p", "xdist", "-p", "vlaeval"]
"""The pytest plugins of a bare install of this package: its own and xdist's."""
OURS = (
    ("-n 1", ["-n", "1"], ""),
    ("-n 2", ["-n", "2"], ""),
    ("-n 2 --vla-video=all", ["-n", "2", "--vla-video=all"], ""),
    ("-n 2 --vla-policy-placement=served", ["-n", "2", "--vla-policy-placement=served"], ""),
    ("-n 2 --vla-lockstep=8, lerobot:DIR:batched", ["-n", "2", "--vla-lockstep=8"], ":batched"),
)
"""Our rows: what the table calls each, its pytest arguments and the suffix of its policy."""


@dataclass(frozen=True)
class Row:
    command: str
    wall: float
    startup: float
    walls: tuple[float, ...] = ()
    """Each round's wall, where the row ran more than once (``wall`` is their median)."""


def median_row(runs: list[Row]) -> Row:
    """A row's rounds as one row: the median wall and start-up, and every wall."""
    walls = tuple(run.wall for run in runs)
    startup = statistics.median(run.startup for run in runs)
    return Row(runs[0].command, statistics.median(walls), startup, walls if len(walls) > 1 else ())


def lerobot_eval(python: Path, checkpoint: Path, episodes: int, batch_size: int, out: Path) -> Row:
    """One ``lerobot-eval`` command, timed."""
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
    eval_s = float(json.loads((out / "eval_info.json").read_text())["overall"]["eval_s"])
    shown = "0 (auto)" if batch_size == 0 else str(batch_size)
    return Row(f"`lerobot-eval --eval.batch_size={shown}`", wall, wall - eval_s)


def ours(checkpoint: str, episodes: int, name: str, extra: list[str], results: Path) -> Row:
    """One ``pytest --policy=lerobot:DIR`` session, timed; its episode records give its start-up."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *BARE_PLUGINS,
        "-q",
        "--benchmark=pusht",
        f"--policy=lerobot:{checkpoint}",
        f"--episodes={episodes}",
        f"--vla-results={results}",
        *extra,
    ]
    started_at = datetime.datetime.now(datetime.timezone.utc)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=BARE_INSTALL, cwd=results.parent, check=False)
    wall = time.perf_counter() - started
    records = [
        json.loads(line)
        for log in results.glob("*/episodes/*.jsonl")
        for line in log.read_text().splitlines()
        if line.strip()
    ]
    if done.returncode not in (0, 1) or len(records) != episodes or any(r["outcome"] == "error" for r in records):
        raise SystemExit(f"pytest {shlex.join(extra)} failed ({done.returncode}): {done.stdout.strip()[-2000:]}")
    first_end = min(datetime.datetime.fromisoformat(r["time"]) for r in records)
    typical = statistics.median(r["wall_time"] for r in records)
    startup = (first_end - started_at).total_seconds() - typical
    return Row(f"`pytest --policy=lerobot:DIR {name}`", wall, startup)


def table(rows: list[Row], episodes: int, b1: Row, best: Row) -> list[str]:
    """The rows as the docs' markdown table."""
    lines = [
        "| command | wall s | start-up s | episodes/s | vs `lerobot-eval` b=1 | vs its best b |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        spread = f" ({min(row.walls):.1f}-{max(row.walls):.1f})" if row.walls else ""
        lines.append(
            f"| {row.command} | {row.wall:.1f}{spread} | {row.startup:.1f} | {episodes / row.wall:.3f} "
            f"| {b1.wall / row.wall:.2f}x | {best.wall / row.wall:.2f}x |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=("act", "diffusion"), default="act", help="the checkpoint's policy [act]")
    parser.add_argument("--episodes", type=int, default=16, help="Push-T episodes per row [16]")
    parser.add_argument(
        "--batch-sizes",
        default="2,4,8,16,0",
        help="lerobot-eval's batch sizes tried beside 1, the fastest shown as its best (0: automatic) [2,4,8,16,0]",
    )
    parser.add_argument("--row", action="append", default=[], metavar="ARGS", help="one more row of ours: pytest ARGS")
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every row, interleaved; the table shows medians [1]"
    )
    parser.add_argument("--smoke", action="store_true", help="two episodes, batch size 2: checks that the script works")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds is a count of runs of every row, at least 1, not {args.rounds}")
    episodes = 2 if args.smoke else args.episodes
    sizes = [2] if args.smoke else [int(size) for size in args.batch_sizes.split(",") if size.strip()]
    python = interpreter_python("lerobot")
    if not python.is_file():
        raise SystemExit(f"no LeRobot interpreter at {python}: run `vlaeval install lerobot`")
    load_before = os.getloadavg()
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
        extra_rows = [(row, shlex.split(row), "") for row in args.row]
        runs: dict[str, list[Row]] = {}
        for round_ in range(args.rounds):
            for size in (1, *sizes):
                row = lerobot_eval(python, checkpoint, episodes, size, root / f"lerobot-b{size}-{round_}")
                runs.setdefault(f"b{size}", []).append(row)
            for number, (name, extra, suffix) in enumerate((*OURS, *extra_rows)):
                results = root / f"ours-{number}-{round_}" / "results"
                results.parent.mkdir()
                runs.setdefault(name, []).append(ours(f"{checkpoint}{suffix}", episodes, name, extra, results))
        b1 = median_row(runs["b1"])
        batched = [median_row(runs[f"b{size}"]) for size in sizes]
        best = min([b1, *batched], key=lambda row: row.wall)
        rows = [b1] if best is b1 else [b1, best]
        rows += [median_row(runs[name]) for name, _, _ in (*OURS, *extra_rows)]
    load_after = os.getloadavg()
    rounds = f", the median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(
        f"Push-T, {episodes} episodes from seed {START_SEED}, a random-init {args.policy} checkpoint on the CPU, "
        f"{os.cpu_count()} cores{rounds}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(
        "lerobot-eval's batch sizes: "
        + ", ".join(f"{row.command.split('=')[1][:-1]} {row.wall:.1f} s" for row in batched)
    )
    print("\n".join(table(rows, episodes, b1, best)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
