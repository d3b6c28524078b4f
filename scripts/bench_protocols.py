#!/usr/bin/env python
"""Benchmark one policy behind each wire protocol (a measurement, not a test); prints one table.

The same batched policy (``bench_serving.BenchPolicy``, chunks of 8) is served four ways, each
driven by the plugin's own client for that protocol, one client process per episode, at 1, 4,
8 and 16 concurrent episodes:

- ``vlaeval``: ``vlaeval serve`` (this package's protocol), client ``ws://``;
- ``openpi``: ``vlaeval serve --protocol openpi``, client ``openpi://?chunk_size=8``;
- ``vla-eval``: ``vlaeval serve --protocol vla-eval``, client ``vla-eval://``;
- ``vla-eval's server``: vla-eval's own batching ``PredictModelServer`` (max batch 16, max wait
  5 ms, as ours), client ``vla-eval://``.

    python scripts/bench_protocols.py [--seconds 2] [--smoke]

Actions/s counts every action the clients receive: a whole chunk of 8 per reply, except from our
``--protocol vla-eval`` server, which splits chunks itself (one action per observation, the
policy called once per 8). Mean batch is policy calls' mean size. Our servers run in child
processes; vla-eval's server runs on an event loop in a thread of this process.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from anyio.from_thread import start_blocking_portal
from bench_serving import CHUNK, BenchPolicy, SmokeBenchPolicy, episode, mikasa_obs
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import serve_async

from pytest_vlaeval.serving import ServerProcess, connect_policy, from_wire_observation, parse_remote_spec

CONCURRENCY = (1, 4, 8, 16)
SMOKE_CONCURRENCY = (2,)
SERVER_ARGS = ["--max-batch-size", "16", "--max-wait-ms", "5"]


class VlaEvalBenchServer(PredictModelServer):
    """vla-eval's own batching model server around the same policy, counting its batches."""

    def __init__(self, policy: BenchPolicy) -> None:
        super().__init__(max_batch_size=16, max_wait_time=0.005)
        self.policy = policy
        self.requests = 0
        self.batches = 0

    def predict_batch(self, obs_batch: list[dict[str, Any]], ctx_batch: list[Any]) -> list[dict[str, Any]]:
        self.requests += len(obs_batch)
        self.batches += 1
        chunks = self.policy.act_batch(list(ctx_batch), [from_wire_observation(obs) for obs in obs_batch])
        return [{"actions": chunk} for chunk in chunks]


def client(spec: str, i: int, start_at: float, stop_at: float) -> list[tuple[float, int]]:
    """One episode in its own process, as an xdist worker would be; returns (latency, actions) per act."""
    policy = connect_policy(parse_remote_spec(spec), 7, "bench")
    obs = mikasa_obs(i)
    policy.reset(episode(i))
    policy.act(obs)  # warm: the first request of an episode is not typical
    time.sleep(max(start_at - time.time(), 0))
    acts: list[tuple[float, int]] = []
    while not acts or time.time() < stop_at:  # one at least, however late
        began = time.perf_counter()
        actions = np.asarray(policy.act(obs))
        acts.append((time.perf_counter() - began, len(actions) if actions.ndim == 2 else 1))
    policy.close()
    return acts


def measure(
    pool: Any, spec: str, clients: int, seconds: float, counters: Callable[[], tuple[int, int]]
) -> tuple[float, float, float, float]:
    """(actions/s, p50 ms, p99 ms, mean batch) over ``seconds`` of ``clients`` concurrent episodes."""
    start_at = time.time() + 1.0  # every client connected and warmed up before the clock starts
    before = counters()
    jobs = [(spec, i, start_at, start_at + seconds) for i in range(clients)]
    acts = [act for own in pool.starmap(client, jobs) for act in own]
    after = counters()
    mean_batch = (after[0] - before[0]) / max(after[1] - before[1], 1)
    p50, p99 = np.percentile([latency for latency, _ in acts], [50, 99]) * 1000
    return sum(count for _, count in acts) / seconds, p50, p99, mean_batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per cell [2]")
    parser.add_argument("--smoke", action="store_true", help="2 episodes, 0.5 s, a narrow policy: does it run at all")
    args = parser.parse_args()
    concurrency = SMOKE_CONCURRENCY if args.smoke else CONCURRENCY
    seconds = 0.5 if args.smoke else args.seconds
    policy_class = SmokeBenchPolicy if args.smoke else BenchPolicy

    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    logs = Path(tempfile.mkdtemp(prefix="bench-protocols-"))
    spec = f"bench_serving:{policy_class.__name__}"
    ours = {
        protocol: ServerProcess(spec, logs / f"{protocol}.log", [*SERVER_ARGS, "--protocol", protocol], env)
        for protocol in ("vlaeval", "openpi", "vla-eval")
    }
    rows: dict[str, list[tuple[float, float, float, float]]] = {}
    # Client processes are forked before this process runs any torch code; they never do.
    with multiprocessing.get_context("fork").Pool(max(concurrency)) as pool, start_blocking_portal() as portal:
        try:
            for server in ours.values():
                server.start()
            theirs = VlaEvalBenchServer(policy_class())
            running, port = portal.start_task(serve_async, theirs, "127.0.0.1", 0)
            cases = {
                "vlaeval (ws://)": (ours["vlaeval"].url, ours["vlaeval"]),
                "openpi (openpi://)": (
                    ours["openpi"].url.replace("ws://", "openpi://") + f"?chunk_size={CHUNK}",
                    ours["openpi"],
                ),
                "vla-eval (vla-eval://)": (ours["vla-eval"].url.replace("ws://", "vla-eval://"), ours["vla-eval"]),
            }
            for name, (url, server) in cases.items():

                def counters(server: ServerProcess = server) -> tuple[int, int]:
                    health = server.health()
                    return health["requests"], health["batches"]

                rows[name] = [measure(pool, url, n, seconds, counters) for n in concurrency]
            rows["vla-eval's own server (vla-eval://)"] = [
                measure(pool, f"vla-eval://127.0.0.1:{port}", n, seconds, lambda: (theirs.requests, theirs.batches))
                for n in concurrency
            ]
            running.cancel()
        finally:
            for server in ours.values():
                server.stop()

    print(
        f"policy: bench_serving.{policy_class.__name__} (CPU torch, 1 thread, chunk {CHUNK}); {os.cpu_count()} CPU cores;"
    )
    print("servers: max batch 16, max wait 5 ms; one client process per episode; MIKASA-sized observations.\n")
    print("| server (client) | episodes | actions/s | p50 ms | p99 ms | mean batch |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, cells in rows.items():
        for clients, (rate, p50, p99, mean) in zip(concurrency, cells, strict=True):
            print(f"| {name} | {clients} | {rate:,.0f} | {p50:.1f} | {p99:.1f} | {mean:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
