#!/usr/bin/env python
"""Benchmark the policy server (a measurement, not a test); prints one table and the targets.

- Throughput and latency at 1, 2, 4, 8 and 16 concurrent episodes, each driven by the plugin's
  own ws:// client in its own thread, for a CPU torch policy whose forward cost grows
  sublinearly with batch size: through the server batched, through the server with
  ``--max-batch-size 1``, and the policy's own in-process batched forward rate (the ceiling).
- The round-trip overhead for MIKASA-sized observations (two 128x128x3 images and proprio)
  with a trivial policy, and the server's memory over 10,000 requests.
- The hop per step: what one ``act`` costs a client beyond the policy's own computation (client
  encode, websocket, server decode, batcher, policy thread and back, reply), for each wire
  protocol and a Push-T-, a MIKASA- and a LIBERO-sized observation, with the same-machine fast
  path (arrays through shared memory) and without it (``vlaeval serve --no-shared-memory``).
  The policy is the built-in ``zero`` (about a microsecond a call), served as a session serves
  (``--max-batch-size 16 --max-wait-ms 5``), one client process, one episode. Besides the wall
  time (mean, p95), the CPU time both processes spent a step: on a shared machine the wall time
  also holds waits for a core, the CPU time only the work.

    python scripts/bench_serving.py [--seconds 3] [--requests 10000] [--hop-steps 2000] [--smoke]

The server runs in a child process; policy forwards use one torch thread there and here.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytest_vlaeval.policy import EpisodeInfo, ZeroPolicy
from pytest_vlaeval.serving import ServerProcess, connect_policy, parse_remote_spec

CONCURRENCY = (1, 2, 4, 8, 16)
HOP_PROTOCOLS = (("vlaeval", "ws://"), ("openpi", "openpi://"), ("vla-eval", "vla-eval://"))
HOP_WARM_UP = 50
HOP_TARGET_MS = 1.0
SMOKE_CONCURRENCY = (1, 2)
WIDTH = 4096
CHUNK = 8


class BenchPolicy:
    """An MLP over a pooled image and proprio: at small batch the weights' memory traffic dominates,
    so a batch of 16 costs far less than 16 batches of one."""

    chunk_size = CHUNK
    width = WIDTH
    device = "cpu"

    def __init__(self) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        layers = [torch.nn.Linear(6 * 16 * 16 + 7, self.width), torch.nn.ReLU()]
        for _ in range(3):
            layers += [torch.nn.Linear(self.width, self.width), torch.nn.ReLU()]
        net = torch.nn.Sequential(*layers, torch.nn.Linear(self.width, CHUNK * 7), torch.nn.Tanh())
        self.net = net.eval().to(self.device)
        self.config = {"parameters": sum(p.numel() for p in self.net.parameters())}

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return self.act_batch([None], [obs])[0]

    @torch.inference_mode()
    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> np.ndarray:
        rgb = torch.as_tensor(np.concatenate([np.asarray(o["rgb"]) for o in observations]), device=self.device)
        image = torch.nn.functional.avg_pool2d(rgb.permute(0, 3, 1, 2).float() / 255, 8).flatten(1)
        proprio = torch.as_tensor(np.concatenate([np.asarray(o["proprio"]) for o in observations]), device=self.device)
        return self.net(torch.cat([image, proprio], 1)).view(-1, CHUNK, 7).cpu().numpy()


class SmokeBenchPolicy(BenchPolicy):
    """The same network, narrow enough that ``--smoke`` builds it in a blink."""

    width = 256


class CudaBenchPolicy(BenchPolicy):
    """The same network on the first CUDA device (``scripts/gpu_bench.py``'s serving rows)."""

    device = "cuda"


def mikasa_obs(seed: int) -> dict[str, Any]:
    """What a MIKASA episode hands the policy: two stacked 128x128 RGB cameras, proprio, instruction."""
    rng = np.random.default_rng(seed)
    return {
        "rgb": rng.integers(0, 256, (1, 128, 128, 6), dtype=np.uint8),
        "proprio": rng.standard_normal((1, 7), dtype=np.float32),
        "instruction": "remember the color of the cube",
    }


def pusht_obs(seed: int) -> dict[str, Any]:
    """A Push-T observation as the plugin hands it over: a 96x96 RGB image and the pusher's position."""
    rng = np.random.default_rng(seed)
    return {
        "pixels": rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        "agent_pos": rng.uniform(0, 512, 2).astype(np.float32),
        "instruction": "",
    }


def libero_obs(seed: int) -> dict[str, Any]:
    """A LIBERO-sized observation under LeRobot's naming: two 256x256 RGB cameras and an 8-vector."""
    rng = np.random.default_rng(seed)
    return {
        "pixels": {name: rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for name in ("image", "image2")},
        "agent_pos": rng.standard_normal(8, dtype=np.float32),
        "instruction": "put the bowl on the plate",
    }


HOP_OBSERVATIONS = {"Push-T 96x96x3": pusht_obs, "MIKASA 128x128x6": mikasa_obs, "LIBERO 2x256x256x3": libero_obs}


def episode(i: int) -> EpisodeInfo:
    return EpisodeInfo(task="Bench-v0", seed=i, instruction="", episode_index=i, max_steps=10**9)


def ceiling(policy: BenchPolicy, batch: int, seconds: float) -> float:
    """Actions per second of the policy's own batched forward, in this process."""
    observations = [mikasa_obs(i) for i in range(batch)]
    policy.act_batch([None] * batch, observations)
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        policy.act_batch([None] * batch, observations)
        calls += 1
    return calls * batch * CHUNK / (time.perf_counter() - started)


def client(url: str, i: int, start_at: float, stop_at: float, requests: int, reopen_every: int) -> list[float]:
    """One episode in its own process, as an xdist worker would be: act from ``start_at`` until
    ``stop_at`` or ``requests`` requests; returns the latencies in seconds."""
    policy = connect_policy(parse_remote_spec(url), 7)
    obs = mikasa_obs(i)
    policy.reset(episode(i))
    policy.act(obs)  # warm: the first request of an episode is not typical
    time.sleep(max(start_at - time.time(), 0))
    latencies: list[float] = []
    while len(latencies) < requests and (not latencies or time.time() < stop_at):  # one at least, however late
        if reopen_every and latencies and len(latencies) % reopen_every == 0:
            policy.reset(episode(i))
        began = time.perf_counter()
        policy.act(obs)
        latencies.append(time.perf_counter() - began)
    policy.close()
    return latencies


def drive(
    pool: Any, url: str, clients: int, seconds: float = 1e9, requests: int = 10**9, reopen: int = 0
) -> list[float]:
    start_at = time.time() + 1.0  # every client connected and warmed up before the clock starts
    jobs = [(url, i, start_at, start_at + seconds, requests, reopen) for i in range(clients)]
    return [t for own in pool.starmap(client, jobs) for t in own]


def through_server(pool: Any, server: ServerProcess, clients: int, seconds: float) -> tuple[float, float, float, float]:
    """(actions/s, p50 ms, p99 ms, mean batch size) over ``seconds`` of ``clients`` episodes."""
    before = server.health()
    latencies = drive(pool, server.url, clients, seconds)
    after = server.health()
    mean_batch = (after["requests"] - before["requests"]) / max(after["batches"] - before["batches"], 1)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    return len(latencies) * CHUNK / seconds, p50, p99, mean_batch


def hop_client(url: str, observation: str, steps: int) -> tuple[list[float], float]:
    """One episode in its own process: the seconds each of ``steps`` acts took, after a warm-up,
    and the CPU seconds this process spent on them."""
    policy = connect_policy(parse_remote_spec(url), 7)
    obs = HOP_OBSERVATIONS[observation](0)
    policy.reset(episode(0))
    for _ in range(HOP_WARM_UP):
        policy.act(obs)
    latencies = []
    cpu = time.process_time()
    for _ in range(steps):
        began = time.perf_counter()
        policy.act(obs)
        latencies.append(time.perf_counter() - began)
    cpu = time.process_time() - cpu
    policy.close()
    return latencies, cpu


def hop_table(
    pool: Any, env: dict[str, str], logs: Path, steps: int
) -> list[tuple[str, str, bool, float, float, float, int]]:
    """(protocol, observation, fast path, mean ms, p95 ms, CPU ms of client and server a step,
    frames the server took from shared memory) for every protocol and observation, with and
    without the fast path."""
    rows = []
    for protocol, scheme in HOP_PROTOCOLS:
        for fast in (False, True):
            args = ["--protocol", protocol, *([] if fast else ["--no-shared-memory"])]
            server = ServerProcess("zero", logs / f"hop-{protocol}-{fast}.log", args, env)
            server.start()
            assert server.proc is not None
            try:
                url = server.url.replace("ws://", scheme, 1)
                for observation in HOP_OBSERVATIONS:
                    frames, server_cpu = server.health()["shared_memory_frames"], cpu_seconds(server.proc.pid)
                    latencies, client_cpu = pool.apply(hop_client, (url, observation, steps))
                    server_cpu = cpu_seconds(server.proc.pid) - server_cpu  # its health checks: a few ms in all
                    frames = server.health()["shared_memory_frames"] - frames
                    ms = np.array(latencies) * 1000
                    cpu_ms = (client_cpu + server_cpu) / steps * 1000
                    rows.append((protocol, observation, fast, ms.mean(), np.percentile(ms, 95), cpu_ms, frames))
            finally:
                server.stop()
    return rows


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell [3]")
    parser.add_argument("--requests", type=int, default=10_000, help="requests for the memory check [10000]")
    parser.add_argument("--hop-steps", type=int, default=2_000, help="steps per cell of the hop table [2000]")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 and 2 episodes, 0.5 s per cell, 400 requests, 100 hop steps: does it run at all",
    )
    args = parser.parse_args()
    concurrency = SMOKE_CONCURRENCY if args.smoke else CONCURRENCY
    seconds, requests, hop_steps = (0.5, 400, 100) if args.smoke else (args.seconds, args.requests, args.hop_steps)
    policy_class = SmokeBenchPolicy if args.smoke else BenchPolicy

    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    logs = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    # Client processes are forked before this process runs any torch code; they never do.
    with multiprocessing.get_context("fork").Pool(max(concurrency)) as pool:
        rows = throughput_table(pool, env, logs, policy_class, concurrency, seconds)
        overhead, memory = overhead_and_memory(pool, env, logs, requests)
        hops = hop_table(pool, env, logs, hop_steps)

    policy = policy_class()
    print(
        f"policy: {policy_class.__name__}, MLP over pooled image + proprio, {policy.config['parameters'] / 1e6:.1f}M parameters, chunk {CHUNK},"
    )
    print("CPU torch, 1 thread; server: max-batch-size 16, max-wait-ms 5 (batched) or max-batch-size 1;")
    print("one client process per episode. Actions/s count every action of every returned chunk.\n")
    print(
        "| episodes | ceiling actions/s | batched actions/s | % of ceiling | p50 ms | p99 ms | mean batch "
        "| batch-size-1 actions/s | p50 ms | p99 ms | batched / bs1 |"
    )
    print("|---:" * 11 + "|")
    for clients, ceiling_rate, (rate, p50, p99, mean), (rate1, p50_1, p99_1, _) in rows:
        print(
            f"| {clients} | {ceiling_rate:,.0f} | {rate:,.0f} | {100 * rate / ceiling_rate:.0f}% | {p50:.1f} | {p99:.1f} "
            f"| {mean:.2f} | {rate1:,.0f} | {p50_1:.1f} | {p99_1:.1f} | {rate / rate1:.2f}x |"
        )
    p50, p99, in_process_ms = overhead
    served, rss_warm, rss_end = memory
    print(
        f"\nround trip, MIKASA-sized observation ({128 * 128 * 6 + 7 * 4} bytes of arrays), trivial policy, "
        f"exact mode: p50 {p50:.2f} ms, p99 {p99:.2f} ms (the policy itself: {in_process_ms * 1000:.0f} us)"
    )
    growth = (rss_end - rss_warm) / 2**20
    print(
        f"server memory over {served:,} requests (4 episodes, each reopened every 100 requests): "
        f"{rss_warm / 2**20:.1f} MiB after the first 10%, {rss_end / 2**20:.1f} MiB at the end ({growth:+.1f} MiB)"
    )
    print(
        f"\nthe hop per step ({hop_steps:,} steps a cell, {os.cpu_count()} CPU cores): ms a step beyond the policy's "
        "own computation,\nwithout and with the fast path (arrays through shared memory); CPU: ms of CPU time client "
        "and server spent a step;\nframes: how many the server took from shared memory\n"
    )
    print("| protocol | observation | without: mean | p95 | CPU | with: mean | p95 | CPU | frames |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    by_cell = {(protocol, observation, fast): row for protocol, observation, fast, *row in hops}
    for protocol, _ in HOP_PROTOCOLS:
        for observation in HOP_OBSERVATIONS:
            mean, p95, cpu, _ = by_cell[protocol, observation, False]
            fast_mean, fast_p95, fast_cpu, frames = by_cell[protocol, observation, True]
            print(
                f"| {protocol} | {observation} | {mean:.3f} | {p95:.3f} | {cpu:.3f} "
                f"| {fast_mean:.3f} | {fast_p95:.3f} | {fast_cpu:.3f} | {frames:,} |"
            )
    fast_hops = [row for row in hops if row[2]]
    clients, ceiling_rate, batched, exact = next((row for row in rows if row[0] == 8), rows[-1])
    checks = [
        (f"{clients} episodes: batched >= 90% of the in-process ceiling", batched[0] >= 0.9 * ceiling_rate),
        (f"{clients} episodes: batched >= 2x batch-size-1", batched[0] >= 2 * exact[0]),
        (
            f"the hop with the fast path <= {HOP_TARGET_MS:g} ms a step (mean), every protocol and observation, "
            "every frame through shared memory",
            all(mean <= HOP_TARGET_MS and frames == hop_steps + HOP_WARM_UP for *_, mean, _, _, frames in fast_hops),
        ),
        ("server memory flat (< 5 MiB growth after warm-up)", growth < 5.0),
    ]
    print()
    for name, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}  {name}")
    return 0


def throughput_table(
    pool: Any,
    env: dict[str, str],
    logs: Path,
    policy_class: type[BenchPolicy],
    concurrency: tuple[int, ...],
    seconds: float,
) -> list[tuple]:
    spec = f"bench_serving:{policy_class.__name__}"
    servers = {
        "batched": ServerProcess(spec, logs / "batched.log", ["--max-batch-size", "16", "--max-wait-ms", "5"], env),
        "exact": ServerProcess(spec, logs / "exact.log", ["--max-batch-size", "1"], env),
    }
    policy = policy_class()
    rows = []
    try:
        for server in servers.values():
            server.start()
        for clients in concurrency:
            batched = through_server(pool, servers["batched"], clients, seconds)
            exact = through_server(pool, servers["exact"], clients, seconds)
            rows.append((clients, ceiling(policy, clients, seconds), batched, exact))
    finally:
        for server in servers.values():
            server.stop()
    return rows


def overhead_and_memory(
    pool: Any, env: dict[str, str], logs: Path, requests: int
) -> tuple[tuple[float, float, float], tuple[int, int, int]]:
    trivial = ServerProcess("zero", logs / "trivial.log", ["--max-batch-size", "1"], env)
    trivial.start()
    try:
        round_trips = min(2_000, requests)
        latencies = drive(pool, trivial.url, 1, requests=round_trips)
        local, obs = ZeroPolicy(7), mikasa_obs(0)
        began = time.perf_counter()
        for _ in range(round_trips):
            local.act(obs)
        in_process_ms = (time.perf_counter() - began) / round_trips * 1000
        p50, p99 = np.percentile(latencies, [50, 99]) * 1000
        assert trivial.proc is not None
        per_client = requests // 4
        served = len(drive(pool, trivial.url, 4, requests=per_client // 10, reopen=100))
        rss_warm = rss_bytes(trivial.proc.pid)
        served += len(drive(pool, trivial.url, 4, requests=per_client - per_client // 10, reopen=100))
        rss_end = rss_bytes(trivial.proc.pid)
    finally:
        trivial.stop()
    return (p50, p99, in_process_ms), (served, rss_warm, rss_end)


if __name__ == "__main__":
    sys.exit(main())
