#!/usr/bin/env python
"""Lockstep groups against lone episodes (a measurement, not a test); prints one table.

Push-T (milliseconds a step) and a torch policy whose batched forward costs about as much as one
sample's, as small networks in eager PyTorch do (their cost is per layer, not per sample): episodes
per second in one process at ``--vla-lockstep`` K of ``--lockstep``, and the same K as ``-n K``
workers sharing one ``--vla-serve`` server that batches across them. Each row is a real pytest
session; every row's records must equal the K=1 row's (success, return, length per episode), or
the script exits 1.

    python scripts/bench_lockstep.py [--episodes 16] [--lockstep 1,4,8] [--layers 96] [--smoke]

A group's K envs step one after the other in one process, so the gain is bounded by the env's
share of a step: (env + forward) / (env + batched forward / K).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

SCRIPTS = Path(__file__).resolve().parent
LAYERS_ENV = "BENCH_LOCKSTEP_LAYERS"
"""How deep the policy is, passed to the sessions' processes (a policy is built from its factory alone)."""


class LockstepBenchPolicy:
    """A narrow, deep transformer over 16 image tokens and the pusher's position; its target is an
    absolute (x, y) in [0, 512]^2. Deterministic weights (seed 0), one thread, no state."""

    chunk_size = 1
    width = 64
    tokens = 16

    def __init__(self) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        layers = int(os.environ.get(LAYERS_ENV, "96"))
        layer = torch.nn.TransformerEncoderLayer(self.width, 4, 2 * self.width, batch_first=True, dropout=0.0)
        self.embed = torch.nn.Linear(5, self.width)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
        self.head = torch.nn.Linear(self.width, 2)
        self.config = {"layers": layers, "width": self.width, "tokens": self.tokens}

    def reset(self, episode: Any) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return self.act_batch([None], [obs])[0]

    @torch.inference_mode()
    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> np.ndarray:
        pixels = torch.as_tensor(np.stack([np.asarray(o["pixels"]) for o in observations])).float() / 255
        patches = torch.nn.functional.avg_pool2d(pixels.permute(0, 3, 1, 2), 24).flatten(2).transpose(1, 2)
        position = torch.as_tensor(np.stack([np.asarray(o["agent_pos"]) for o in observations])).float() / 512
        tokens = torch.cat([patches, position[:, None].expand(-1, self.tokens, -1)], 2)
        target = self.head(self.encoder(self.embed(tokens)).mean(1))
        return (256 + 256 * torch.tanh(target)).view(-1, 1, 2).numpy()


def session(workdir: Path, episodes: int, layers: int, *extra: str) -> tuple[float, dict[tuple[str, int], tuple]]:
    """One real pytest session of Push-T with the bench policy; its wall time and records."""
    workdir.mkdir(parents=True)
    command = [
        sys.executable, "-m", "pytest", "--benchmark=pusht", f"--episodes={episodes}", *extra,
        "--vla-results=results", "-p", "no:cacheprovider", "-q", "--rootdir", str(workdir),
    ]  # fmt: skip
    env = {
        **os.environ,
        LAYERS_ENV: str(layers),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")])),
    }
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    records = [
        json.loads(line)
        for log in sorted(workdir.glob("results/*/episodes/*.jsonl"))
        for line in log.read_text().splitlines()
    ]
    errors = [r for r in records if r["outcome"] == "error"]
    if proc.returncode not in (0, 1) or errors or len(records) != episodes:
        detail = errors[0]["message"] if errors else (proc.stdout + proc.stderr)[-3000:]
        raise SystemExit(f"pytest {' '.join(extra)} broke (exit {proc.returncode}): {detail}")
    return wall, {(r["task"], r["seed"]): (r["success"], r["episode_return"], r["length"]) for r in records}


def forward_ms(layers: int, batch: int) -> float:
    """The policy's forward in this process, milliseconds per call."""
    os.environ[LAYERS_ENV] = str(layers)
    policy = LockstepBenchPolicy()
    obs = {"pixels": np.zeros((96, 96, 3), np.uint8), "agent_pos": np.zeros(2)}
    policy.act_batch([None] * batch, [obs] * batch)
    started = time.perf_counter()
    for _ in range(20):
        policy.act_batch([None] * batch, [obs] * batch)
    return (time.perf_counter() - started) / 20 * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16, help="Push-T episodes per row [16]")
    parser.add_argument("--lockstep", default="1,4,8", help="the K of the rows [1,4,8]")
    parser.add_argument("--layers", type=int, default=96, help="transformer layers of the policy [96]")
    parser.add_argument("--smoke", action="store_true", help="2 episodes, K in 1,2, a 2-layer policy")
    args = parser.parse_args()
    episodes, layers = (2, 2) if args.smoke else (args.episodes, args.layers)
    ks = [1, 2] if args.smoke else [int(k) for k in args.lockstep.split(",")]
    policy = "--policy=bench_lockstep:LockstepBenchPolicy"
    print(
        f"{os.cpu_count()} CPU cores; Push-T, {episodes} episodes a row; policy: {layers} layers, forward "
        f"{forward_ms(layers, 1):.1f} ms at batch 1, {forward_ms(layers, max(ks)):.1f} ms at batch {max(ks)}"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-lockstep-") as scratch:
        root = Path(scratch)
        for k in ks:
            wall, records = session(root / f"lockstep-{k}", episodes, layers, policy, f"--vla-lockstep={k}")
            rows.append((f"--vla-lockstep={k}, one process", wall, records))
        for k in ks[1:]:
            served = "--vla-serve=bench_lockstep:LockstepBenchPolicy"
            wall, records = session(root / f"served-{k}", episodes, layers, served, "-n", str(k))
            rows.append((f"-n {k} --vla-serve (batched across workers)", wall, records))
    reference = rows[0][2]
    print("| row | wall [s] | episodes/s | vs K=1 | records as K=1 |")
    print("|---|---:|---:|---:|---|")
    for name, wall, records in rows:
        same = "identical" if records == reference else "DIFFERENT"
        print(f"| {name} | {wall:.1f} | {episodes / wall:.3f} | {rows[0][1] / wall:.2f}x | {same} |")
    identical = all(records == reference for _, _, records in rows)
    print(f"every row gives the same success, return and length per episode: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
