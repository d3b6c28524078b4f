"""What a cluster run costs beyond its episodes: the merge as the run grows, and each shard's own
overhead against one local session.

``merge``: one run directory holding the logs of ``--shards`` shards, filled with synthetic
records of a 90-task benchmark (no simulator: the lines a shard's session writes), timed through
``vlaeval merge RUN_DIR`` in a child process whose peak memory is read too; 4,500, 45,000 and
450,000 records (50, 500 and 5,000 seeds a task). ``shards``: one local serial session over a
fake benchmark's two-step episodes against the same episodes as K shard sessions
(``--vla-shard=auto``, ``VLAEVAL_SHARD=I/K``) run one after another, then their merge: each
shard's own cost, with no scheduler's queueing in it.

    python scripts/bench_cluster.py [--records 4500 45000 450000] [--shards 100] [--episodes 2000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import bench_controller  # the fake benchmark's projects and a timed session, beside this script

TASKS = 90
CHILD = """
import io, json, resource, sys, time
from contextlib import redirect_stdout
from pytest_vlaeval.cli import main
started = time.perf_counter()
with redirect_stdout(io.StringIO()) as said:
    code = main(["merge", sys.argv[1]])
print(json.dumps({"code": code, "seconds": time.perf_counter() - started,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "said": said.getvalue()}))
"""


def synthetic_run(root: Path, seeds: int, shards: int) -> Path:
    """A run directory of ``TASKS`` tasks x ``seeds`` seeds, every episode recorded once by one of ``shards`` shards."""
    from pytest_vlaeval.benchmark.model import load_benchmark, select
    from pytest_vlaeval.results.store import fingerprint
    from pytest_vlaeval.results.subset import shard

    listed = "\n".join(f"  - {{env_id: Task{i}-v0, split: main, max_steps: 100}}" for i in range(TASKS))
    yaml = root / "bench.yaml"
    yaml.write_text(bench_controller.BENCHMARK_YAML.format(tasks=listed).replace("episodes: 1", f"episodes: {seeds}"))
    selection = select(load_benchmark(yaml), "main", collected=False)
    run = root / "run"
    (run / "episodes").mkdir(parents=True)
    (run / "fingerprint.json").write_text(json.dumps(fingerprint(selection, "zero", "cpu"), indent=2))
    (run / "benchmark.yaml").write_bytes(yaml.read_bytes())
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for index in range(1, shards + 1):
        lines = []
        for number, (task, seed) in enumerate(shard(selection, index, shards)):
            success = (seed * 7 + len(task)) % 3 == 0
            lines.append(
                json.dumps(
                    {
                        "task": task,
                        "seed": seed,
                        "outcome": "success" if success else "failure",
                        "success": success,
                        "episode_return": float(success),
                        "length": 100,
                        "message": "",
                        "wall_time": 1.0,
                        "worker": "gw0",
                        "time": (start + timedelta(seconds=number)).isoformat(),
                        "model": {"name": "zero"},
                        "chunk_size": 1,
                        "render_backend": "cpu",
                    }
                )
            )
        log = run / "episodes" / f"20260101T000000-node{index}-{1000 + index}-shard{index}of{shards}.jsonl"
        log.write_text("\n".join(lines) + "\n")
    return run


def measure_merge(records: int, shards: int, where: Path | None) -> dict:
    seeds = max(1, records // TASKS)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-", dir=where) as tmp:
        run = synthetic_run(Path(tmp), seeds, shards)
        done = subprocess.run([sys.executable, "-c", CHILD, str(run)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the merge failed:\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if result["code"] != 0 or f"{seeds * TASKS} completed" not in result["said"]:
            raise SystemExit(f"the merge did not merge every record:\n{result['said']}")
        return {**result, "records": seeds * TASKS}


def measure_shards(episodes: int, shards: int, where: Path | None) -> tuple[float, list[float], float]:
    """Seconds of one local session, of each shard's session, and of their merge."""
    tasks = bench_controller.TASKS
    per_task = max(1, episodes // tasks)
    base = ["--benchmark=bench.yaml", "--policy=zero", f"--episodes={per_task}", "--vla-render=cpu", "-p", "no:xdist"]
    with tempfile.TemporaryDirectory(prefix="bench-cluster-", dir=where) as tmp:
        project, _ = bench_controller.write_projects(Path(tmp), tasks, per_task * tasks)
        local = bench_controller.timed_session(project, [*base, "--vla-results=local"], expected=1)
        shard_times = []
        for index in range(1, shards + 1):
            os.environ["VLAEVAL_SHARD"] = f"{index}/{shards}"
            shard_times.append(
                bench_controller.timed_session(project, [*base, "--vla-results=array", "--vla-shard=auto"], expected=1)
            )
        os.environ.pop("VLAEVAL_SHARD")
        (run,) = (project / "array").iterdir()
        started = time.perf_counter()
        merged = subprocess.run(
            [sys.executable, "-m", "pytest_vlaeval", "merge", str(run)], capture_output=True, text=True
        )
        merge = time.perf_counter() - started
        if merged.returncode != 0 or f"{per_task * tasks} completed" not in merged.stdout:
            raise SystemExit(f"the merge did not complete the run:\n{merged.stdout}{merged.stderr}")
    return local, shard_times, merge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[4500, 45000, 450000], help="records per merge")
    parser.add_argument("--shards", type=int, default=100, help="shards whose logs the merge reads [100]")
    parser.add_argument("--episodes", type=int, default=2000, help="episodes of the shard comparison [2000]")
    parser.add_argument("--array", type=int, default=2, help="shards of the shard comparison [2]")
    parser.add_argument(
        "--where",
        type=Path,
        default=bench_controller.MEMORY_DIR if bench_controller.MEMORY_DIR.is_dir() else None,
        help="where the run directories live [%(default)s]",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the script works")
    args = parser.parse_args(argv)
    sizes, shards, episodes = ([180, 360], 3, 16) if args.smoke else (args.records, args.shards, args.episodes)
    print(f"merge: {TASKS} tasks, {shards} shard logs, synthetic records; in a child process")
    print(f"{'records':>9} {'seconds':>8} {'us/record':>10} {'vs first':>9} {'peak MB':>8}")
    first = None
    for size in sizes:
        result = measure_merge(size, shards, args.where)
        per_record = 1e6 * result["seconds"] / result["records"]
        first = first or per_record
        print(
            f"{result['records']:>9} {result['seconds']:>8.2f} {per_record:>10.1f} {per_record / first:>8.2f}x "
            f"{result['max_rss_mb']:>8.0f}",
            flush=True,
        )
    local, shard_times, merge = measure_shards(episodes, args.array, args.where)
    total = sum(shard_times) + merge
    print(f"shards: {episodes} two-step episodes, one local serial session vs {args.array} shard sessions + merge")
    print(f"{'local s':>8} {'shards s':>9} {'merge s':>8} {'overhead':>9} {'per shard s':>12}")
    print(
        f"{local:>8.2f} {sum(shard_times):>9.2f} {merge:>8.2f} {100 * (total / local - 1):>8.1f}% "
        f"{(total - local) / args.array:>12.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
