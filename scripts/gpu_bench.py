#!/usr/bin/env python
"""The GPU path, measured: render parity, scaling, serving and LIBERO on EGL, in one table.

1. parity: the same MIKASA episodes (random policy, seeded per episode, so deterministic) on the
   GPU and under ``--vla-render=cpu``: success, length and return side by side, with the largest
   difference.
2. scaling: env build time, step time, GPU memory and host RSS per worker and episodes/s at each
   ``-n`` of ``--workers`` on the GPU, and the CPU render path on the same cores.
3. blocks: one worker, ``--vla-lockstep`` K of ``--lockstep`` on one task and the same seeds:
   episodes per hour (the session's wall, and inside its blocks), SR, and how many records equal
   K=1's.
4. placement: ``--vla-placement=0:0-1`` (two workers on GPU 0) against one worker, same episodes.
5. serving: a server (batched and batch-size-1) for a torch policy on the GPU at 1, 8 and 32
   concurrent episodes, against the policy's in-process batched ceiling on the same device.
6. libero: one LIBERO episode on EGL (the renderer the record names says which GPU or Mesa).

The GPU rows simulate on the GPU (``--vla-render=gpu``) when SAPIEN's PhysX GPU library is in place
or can be fetched; otherwise they say why, once, and run ``--vla-render=gpu-render`` (CPU physics,
GPU rendering). Without a CUDA device it prints "no CUDA device: GPU rows skipped", runs every CPU
row (CPU render rows, blocks of separate CPU envs, the serving ceiling on CPU, LIBERO on EGL's
software renderer) and exits 0. It exits 1 when a session breaks (an errored episode is
infrastructure, never a result).

    python scripts/gpu_bench.py [--smoke] [--tasks A,B] [--episodes 3] [--workers 1,4,8,16] [--parts ...]

``--smoke`` is the few-minute version: one episode per task, ``-n 1``, blocks of 1 and 2, its
sessions at once (timings are not its point), the serving benchmark's narrow policy at 1 and 2
episodes for half a second, and LIBERO's render check instead of an episode.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_serving

from pytest_vlaeval.envs import vulkan

SCRIPTS = Path(__file__).resolve().parent
TASKS = ("RememberColor3-VLA-v0", "InterceptSlow-VLA-v0")
"""Short tasks whose assets ship in the wheels: no asset pack to download, which a GPU machine may not reach."""
LIBERO_TASK = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
PARTS = ("parity", "scaling", "blocks", "placement", "serving", "libero")
NO_CUDA = "no CUDA device: GPU rows skipped"
NO_LIBERO = "LIBERO's stack is not installed (scripts/gpu_check.sh --fetch-wheels --libero): LIBERO row skipped"
NO_LAVAPIPE = "no software Vulkan (Mesa's lavapipe): CPU render rows skipped"
SMOKE_SESSIONS = 5
"""--smoke's sessions, all at once: parity on each render (its scaling row shares it), two blocks, placement."""
WORKER_MARK = "exec(eval(sys.stdin"
"""What an xdist worker's command line holds (execnet's bootstrap): how the sampler tells workers apart."""


@dataclass
class Session:
    """One pytest session's records and what the sampler saw of its workers."""

    wall: float
    records: list[dict[str, Any]]
    worker_rss: dict[int, int] = field(default_factory=dict)
    """Peak resident memory per worker process, bytes."""
    worker_gpu: dict[int, int] = field(default_factory=dict)
    """Peak GPU memory per worker process, bytes (empty without nvidia-smi)."""

    def outcomes(self) -> dict[tuple[str, int], tuple[bool, int, float]]:
        return {(r["task"], r["seed"]): (r["success"], r["length"], r["episode_return"]) for r in self.records}

    def backends(self) -> set[str]:
        return {r["render_backend"] for r in self.records}


class Sampler(threading.Thread):
    """Polls a session's xdist workers twice a second: peak RSS from /proc, GPU memory from nvidia-smi."""

    def __init__(self, root: int, gpu: bool) -> None:
        super().__init__(daemon=True)
        self.root, self.gpu = root, gpu
        self.rss: dict[int, int] = {}
        self.gpu_bytes: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            workers = [pid for pid in descendants(self.root) if WORKER_MARK in cmdline(pid)]
            for pid in workers:
                self.rss[pid] = max(self.rss.get(pid, 0), rss_bytes(pid))
            if self.gpu:
                for pid, used in gpu_memory().items():
                    if pid in workers:
                        self.gpu_bytes[pid] = max(self.gpu_bytes.get(pid, 0), used)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_bytes(pid: int) -> int:
    try:
        return bench_serving.rss_bytes(pid)
    except (OSError, RuntimeError):
        return 0


def gpu_memory() -> dict[int, int]:
    """GPU memory per process, bytes, as nvidia-smi reports it."""
    query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    proc = subprocess.run(query, capture_output=True, text=True)
    rows = [line.split(",") for line in proc.stdout.splitlines() if "," in line]
    return {int(pid): int(mib) * 2**20 for pid, mib in rows if mib.strip().isdigit()}


def has_cuda() -> bool:
    """Asked in a child process, so this one forks its client pool before touching CUDA."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
    )
    return probe.stdout.strip().endswith("True")


def run_session(
    workdir: Path,
    benchmark: str,
    tasks: list[str],
    episodes: int,
    workers: int,
    render: str,
    gpu: bool,
    extra: tuple[str, ...] = (),
) -> Session:
    """One real pytest session under ``-n workers`` (or ``extra``'s placement) in a fresh directory,
    its workers sampled as it runs."""
    workdir.mkdir(parents=True)
    command = [
        sys.executable, "-m", "pytest", f"--benchmark={benchmark}", f"--vla-tasks={','.join(tasks)}",
        f"--episodes={episodes}", f"--vla-render={render}", "--policy=random",
        *(["-n", str(workers)] if workers else []), *extra,
        "--vla-results=results", "-p", "no:cacheprovider", "-q", "--rootdir", str(workdir),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid, gpu)
    sampler.start()
    output, _ = proc.communicate()
    sampler.done.set()
    sampler.join()
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # 1: some episodes failed, which is a result
        raise SystemExit(
            f"pytest {benchmark} -n {workers} --vla-render={render} exited {proc.returncode}:\n{output[-3000:]}"
        )
    records = [
        json.loads(line)
        for log in sorted(workdir.glob("results/*/episodes/*.jsonl"))
        for line in log.read_text().splitlines()
    ]
    errors = [r for r in records if r["outcome"] == "error"]
    if errors or not records:
        detail = errors[0]["message"] if errors else output[-3000:]
        raise SystemExit(f"pytest {benchmark} --vla-render={render}: {len(errors)} episodes errored: {detail}")
    return Session(wall, records, sampler.rss, sampler.gpu_bytes)


def parity_rows(gpu: Session | None, cpu: Session) -> list[list[str]]:
    """Per episode: GPU and CPU success/length/return and |return difference|; then the largest difference."""
    rows = []
    gpu_outcomes = gpu.outcomes() if gpu else {}
    worst = 0.0
    for key, (success, length, ret) in sorted(cpu.outcomes().items()):
        cpu_cell = f"cpu {success}/{length}/{ret:.6f}"
        if key not in gpu_outcomes:
            rows.append(["1 parity", f"{key[0]} seed {key[1]}", cpu_cell, "gpu skipped"])
            continue
        g_success, g_length, g_ret = gpu_outcomes[key]
        worst = max(worst, abs(g_ret - ret))
        same = "same" if (g_success, g_length) == (success, length) else "DIFFERENT success/length"
        rows.append(
            [
                "1 parity",
                f"{key[0]} seed {key[1]}",
                cpu_cell,
                f"gpu {g_success}/{g_length}/{g_ret:.6f}, {same}, |d return| {abs(g_ret - ret):.2e}",
            ]
        )
    if gpu:
        rows.append(["1 parity", "largest |return difference|", f"render {sorted(gpu.backends())}", f"{worst:.3e}"])
    return rows


def scaling_row(render: str, workers: int, session: Session) -> list[str]:
    """Env build and step time from the records; memory from the sampler; episodes/s from the wall."""
    reused = [r for r in session.records if not r["env_built"]]
    built = [r for r in session.records if r["env_built"]]
    step = sum(r["wall_time"] for r in reused) / max(sum(r["length"] for r in reused), 1) if reused else None
    # A built episode's wall time is its env build plus its steps at the reused episodes' pace.
    build = statistics.mean(r["wall_time"] - r["length"] * step for r in built) if built and step else None
    rss = max(session.worker_rss.values(), default=0) / 2**20
    gpu = max(session.worker_gpu.values(), default=0) / 2**20
    cells = [
        f"build {build:.1f} s" if build is not None else "build -",
        f"step {1000 * step:.1f} ms" if step else "step - (no reused env)",
        f"RSS/worker {rss:.0f} MiB",
        f"GPU/worker {gpu:.0f} MiB" if render == "gpu" else "",
        f"{len(session.records) / session.wall:.3f} episodes/s",
    ]
    return ["2 scaling", f"-n {workers}", f"--vla-render={render}", ", ".join(c for c in cells if c)]


def blocks_rows(sessions: dict[int, Session], render: str) -> list[list[str]]:
    """Per K: episodes per hour over the session's wall and inside its blocks, SR, and agreement with K=1."""
    lone = sessions[min(sessions)].outcomes()
    rows = []
    for k, session in sorted(sessions.items()):
        # A block's rows all carry its wall time: count it once, as 1/size of it per row.
        in_blocks = sum(r["wall_time"] / (r.get("lockstep") or 1) for r in session.records)
        successes = [r["success"] for r in session.records]
        same = sum(session.outcomes()[key] == outcome for key, outcome in lone.items())
        rows.append(
            [
                "3 blocks",
                f"--vla-lockstep={k}",
                f"--vla-render={render}",
                f"{3600 * len(session.records) / session.wall:,.0f} episodes/h (session), "
                f"{3600 * len(session.records) / in_blocks:,.0f} episodes/h (in blocks), "
                f"SR {sum(successes) / len(successes):.3f} ({sum(successes)}/{len(successes)}), "
                f"{same}/{len(lone)} records as K={min(sessions)}",
            ]
        )
    return rows


def placement_row(one: Session, two: Session, render: str) -> list[str]:
    """Two workers on one GPU against one worker, same episodes."""
    gpu = max(two.worker_gpu.values(), default=0) / 2**20
    same = one.outcomes() == two.outcomes()
    return [
        "4 placement",
        "--vla-placement=0:0-1 vs -n 1",
        f"--vla-render={render}",
        f"{len(two.records) / two.wall:.3f} vs {len(one.records) / one.wall:.3f} episodes/s "
        f"({one.wall / two.wall:.2f}x), GPU/worker {gpu:.0f} MiB, records {'identical' if same else 'DIFFERENT'}",
    ]


def gpu_render_mode() -> str:
    """``gpu`` when the GPU simulation can run here, else ``gpu-render``, saying why once."""
    check = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval.envs.vulkan", "gpu"], capture_output=True, text=True, timeout=600
    )
    if check.returncode == 0:
        return "gpu"
    why = (check.stdout.strip() or check.stderr.strip()).splitlines()[-1]
    print(f"GPU simulation unavailable, GPU rows use --vla-render=gpu-render (CPU physics): {why}", flush=True)
    return "gpu-render"


def serving_rows(pool: Any, gpu: bool, smoke: bool, logs: Path) -> list[list[str]]:
    """bench_serving's throughput table for the GPU policy (or the CPU one without a GPU)."""
    if smoke:
        policy_class, concurrency, seconds = bench_serving.SmokeBenchPolicy, (1, 2), 0.5
    else:
        policy_class, concurrency, seconds = (
            bench_serving.CudaBenchPolicy if gpu else bench_serving.BenchPolicy,
            (1, 8, 32),
            3.0,
        )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")]))}
    rows = []
    table = bench_serving.throughput_table(pool, env, logs, policy_class, concurrency, seconds)
    for clients, ceiling, (rate, _, p99, mean), (rate1, *_) in table:
        rows.append(
            [
                "5 serving",
                f"{clients} episodes",
                f"{policy_class.__name__} on {policy_class.device}",
                f"batched {rate:,.0f} actions/s = {100 * rate / ceiling:.0f}% of ceiling {ceiling:,.0f}, "
                f"mean batch {mean:.2f}, p99 {p99:.1f} ms; batch-size-1 {rate1:,.0f} actions/s",
            ]
        )
    return rows


def libero_row(scratch: Path, smoke: bool) -> list[str]:
    """One LIBERO episode on EGL (``--smoke``: MuJoCo's EGL render check only)."""
    if importlib.util.find_spec("libero") is None:
        return ["6 libero", "skipped", "-", NO_LIBERO]
    if smoke:
        check = subprocess.run(
            [sys.executable, "-m", "pytest_vlaeval.envs.libero", "auto"], capture_output=True, text=True
        )
        if check.returncode != 0:
            raise SystemExit(f"LIBERO render check failed: {(check.stdout + check.stderr).strip()[-2000:]}")
        return ["6 libero", "EGL render check", f"MUJOCO_GL={check.stdout.strip().splitlines()[-1]}", "renders"]
    session = run_session(scratch / "libero", "libero:spatial", [LIBERO_TASK], 1, 1, "auto", False)
    (record,) = session.records
    return [
        "6 libero",
        "1 episode",
        record["render_backend"],
        f"{record['outcome']}, {record['length']} steps, {record['wall_time']:.1f} s",
    ]


def print_table(rows: list[list[str]]) -> None:
    print("| part | what | render | result |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one task, one episode, -n 1, half-second serving cells")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated short-split env ids")
    parser.add_argument("--episodes", type=int, default=3, help="episodes per task [3]")
    parser.add_argument("--workers", default="1,4,8,16", help="the -n values of the scaling rows [1,4,8,16]")
    parser.add_argument("--lockstep", default="1,8,32", help="the --vla-lockstep values of the blocks rows [1,8,32]")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run [{','.join(PARTS)}]")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; valid: {', '.join(PARTS)}")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    episodes = 1 if args.smoke else args.episodes
    workers = [1] if args.smoke else [int(n) for n in args.workers.split(",")]
    lockstep = [1, 2] if args.smoke else [int(k) for k in args.lockstep.split(",")]

    # Client processes are forked before this process runs any torch code; they never do.
    with multiprocessing.get_context("fork").Pool(2 if args.smoke else 32) as pool:
        gpu = has_cuda()
        gpu_mode = gpu_render_mode() if gpu else None
        cpu = vulkan.find_lavapipe_icd() is not None
        for missing, line in ((not gpu, NO_CUDA), (not cpu, NO_LAVAPIPE)):
            if missing:
                print(line, flush=True)
        renders = [r for r in (gpu_mode, "cpu" if cpu else None) if r]
        rows: list[list[str]] = []
        # One session at a time, so that none moves another's timings; --smoke reads no timing
        # worth comparing, so its sessions run at once.
        with (
            tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch_dir,
            ThreadPoolExecutor(SMOKE_SESSIONS if args.smoke else 1) as starter,
        ):
            sessions: dict[tuple[str, int], Future[Session]] = {}

            def mikasa(render: str, n: int) -> Future[Session]:
                """A MIKASA session of the chosen episodes, run once per (render, -n) and shared by the parts."""
                if (render, n) not in sessions:
                    workdir = Path(scratch_dir) / f"mikasa-{render}-{n}"
                    sessions[render, n] = starter.submit(run_session, workdir, "short", tasks, episodes, n, render, gpu)
                return sessions[render, n]

            # Every session the parts need, submitted in the order the parts print.
            parity_workers = 1 if args.smoke else min(4, max(workers))
            block_render = gpu_mode or ("cpu" if cpu else None)
            wanted = [(r, parity_workers) for r in renders if "parity" in parts]
            wanted += [(r, n) for r in renders for n in workers if "scaling" in parts]
            for render_mode, n in wanted:
                mikasa(render_mode, n)
            runs = {
                k: starter.submit(
                    run_session,
                    Path(scratch_dir) / f"blocks-{k}",
                    "short",
                    tasks[:1],
                    max(lockstep),
                    1,
                    block_render,
                    gpu,
                    (f"--vla-lockstep={k}",),
                )
                for k in (lockstep if "blocks" in parts and block_render else [])
            }
            two = None
            if "placement" in parts and gpu_mode:
                mikasa(gpu_mode, 1)
                two = starter.submit(
                    run_session,
                    Path(scratch_dir) / "placement",
                    "short",
                    tasks,
                    episodes,
                    0,
                    gpu_mode,
                    gpu,
                    ("--vla-placement=0:0-1",),
                )

            if "parity" in parts:
                on_gpu = mikasa(gpu_mode, parity_workers).result() if gpu_mode else None
                if on_gpu and on_gpu.backends() != {gpu_mode}:
                    raise SystemExit(f"--vla-render={gpu_mode} ran on {sorted(on_gpu.backends())}")
                if cpu:
                    rows += parity_rows(on_gpu, mikasa("cpu", parity_workers).result())
                else:
                    rows.append(["1 parity", "skipped", "cpu", NO_LAVAPIPE])
            if "scaling" in parts:
                rows += [scaling_row(r, n, mikasa(r, n).result()) for r in renders for n in workers]
            if runs:
                rows += blocks_rows({k: run.result() for k, run in runs.items()}, block_render)
            if two:
                rows.append(placement_row(mikasa(gpu_mode, 1).result(), two.result(), gpu_mode))
            if "serving" in parts:
                rows += serving_rows(pool, gpu, args.smoke, Path(scratch_dir))
            if "libero" in parts:
                rows.append(libero_row(Path(scratch_dir), args.smoke))
    print(
        f"{os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}; "
        + ("CUDA device present" if gpu else NO_CUDA)
    )
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
