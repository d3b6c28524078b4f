"""vla-eval's model-server protocol, both ways, against the real ``vla-eval`` package: our
``vla-eval://`` client against a model server built on vla-eval's own base classes, and our
``--protocol vla-eval`` server driven by vla-eval's own client."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from anyio.from_thread import start_blocking_portal
from helpers import TESTS, episode_records, together
from PIL import Image
from spy_policies import EpisodeMemory
from vla_eval.connection import Connection
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import serve_async
from websockets.sync.client import ClientConnection, connect

from pytest_vlaeval.envs.adapter import Adapter
from pytest_vlaeval.episodes.loop import EpisodeResult, run_episode
from pytest_vlaeval.errors import PolicyError, ServerError
from pytest_vlaeval.policy import EpisodeInfo
from pytest_vlaeval.policy.loading import build_policy, parse_local_policy, parse_policy
from pytest_vlaeval.serving.server import vla_eval_handler
from pytest_vlaeval.serving.server.policy_server import ServerConfig
from pytest_vlaeval.serving.server.thread import ServerThread
from pytest_vlaeval.serving.wire.vla_eval import decode_images, from_wire_observation, pack_frame, unpack_frame

FAKE = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "-rA"]
OPTIONS = "timeout=60&connect_timeout=5"


class HostedPolicy(PredictModelServer):
    """vla-eval's batching model server with one of our policies per session inside.

    ``split_chunks`` makes vla-eval's server hand out a chunk one action per observation
    (its ``chunk_size``); otherwise the whole chunk is returned and the client executes it.
    """

    def __init__(self, policy_class: Callable[[], Any], split_chunks: bool) -> None:
        super().__init__(chunk_size=2 if split_chunks else None, max_batch_size=4, max_wait_time=0.005)
        self.policy_class = policy_class
        self.policies: dict[str, Any] = {}
        self.started: list[dict[str, Any]] = []
        self.ended: list[dict[str, Any]] = []
        self.predictions = 0

    async def on_episode_start(self, config: dict[str, Any], ctx: Any) -> None:
        await super().on_episode_start(config, ctx)
        task = config["task"]
        self.started.append(task)
        policy = self.policy_class()
        fields = ("task", "seed", "instruction", "episode_index", "max_steps")
        policy.reset(EpisodeInfo(**{name: task[name] for name in fields}))
        self.policies[ctx.session_id] = policy

    async def on_episode_end(self, result: dict[str, Any], ctx: Any) -> None:
        await super().on_episode_end(result, ctx)
        self.ended.append(result)

    def predict_batch(self, obs_batch: list[dict[str, Any]], ctx_batch: list[Any]) -> list[dict[str, Any]]:
        self.predictions += len(obs_batch)
        return [
            {"actions": self.policies[ctx.session_id].act(from_wire_observation(obs))}
            for obs, ctx in zip(obs_batch, ctx_batch, strict=True)
        ]


@pytest.fixture
def hosted() -> Iterator[Callable[[bool], tuple[HostedPolicy, str]]]:
    """Start vla-eval's own server (``serve_async``) on a free loopback port; returns its spec."""
    with start_blocking_portal() as portal:
        running = []

        def start(split_chunks: bool) -> tuple[HostedPolicy, str]:
            server = HostedPolicy(EpisodeMemory, split_chunks)
            future, port = portal.start_task(serve_async, server, "127.0.0.1", 0)
            running.append(future)
            return server, f"vla-eval://127.0.0.1:{port}?{OPTIONS}"

        yield start
        for future in running:
            future.cancel()


class LoggingEnv(Adapter):
    """A tiny env that keeps every action it executes; observations vary with seed and step."""

    max_episode_steps = 7  # odd: the last chunk is cut short

    def __init__(self) -> None:
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed: int, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        self.seed, self.t = seed, 0
        return self._obs(), {"language_instruction": "touch the cube"}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self.actions.append(action.copy())
        self.t += 1
        return self._obs(), float(action[0]), False, False, {"success": bool(action[0] > 0.8)}

    def _obs(self) -> dict[str, Any]:
        rng = np.random.default_rng([self.seed, self.t])
        return {
            "rgb": rng.integers(0, 256, size=(1, 8, 8, 6), dtype=np.uint8),
            "proprio": rng.normal(size=(1, 7)).astype(np.float32),
            "oracle": np.ones(3),
        }


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.01)


def executed(policy: Any, seeds: list[int]) -> list[tuple[np.ndarray, EpisodeResult]]:
    runs = []
    for index, seed in enumerate(seeds):
        env = LoggingEnv()
        result = run_episode(
            env,
            policy,
            task="Alpha-v0",
            seed=seed,
            episode_index=index,
            action_dim=7,
            policy_obs_keys=("rgb", "proprio"),
        )
        runs.append((np.stack(env.actions), result))
    return runs


@pytest.mark.parametrize("split_chunks", [False, True], ids=["whole-chunks", "server-splits-chunks"])
def test_client_executes_the_same_actions_as_the_in_process_policy(hosted, split_chunks: bool) -> None:
    server, spec = hosted(split_chunks)
    seeds = [3, 39, 3]
    local = executed(EpisodeMemory(), seeds)
    remote_policy = build_policy(parse_policy(spec), 7, "fake")
    remote = executed(remote_policy, seeds)
    for (local_actions, local_result), (remote_actions, remote_result) in zip(local, remote, strict=True):
        np.testing.assert_array_equal(remote_actions, local_actions)
        assert remote_result == local_result
    assert len({result.success for _, result in local}) == 2, "a meaningful comparison"
    assert server.predictions == 3 * 4, "one inference per chunk of two, over 7 steps"
    assert [(t["env_id"], t["seed"], t["episode_index"], t["instruction"]) for t in server.started] == [
        ("Alpha-v0", seed, i, "touch the cube") for i, seed in enumerate(seeds)
    ]
    assert {t["benchmark"] for t in server.started} == {"fake"}
    wait_until(lambda: len(server.ended) == len(seeds))  # episode_end gets no reply: it may still be in flight
    assert [(e["metrics"]["success"], e["metrics"]["episode_return"], e["steps"]) for e in server.ended] == [
        (r.success, r.episode_return, r.length) for _, r in local
    ]
    assert remote_policy.name == "HostedPolicy" and remote_policy.chunk_size == (1 if split_chunks else 2)
    assert remote_policy.config["capabilities"] == {} and remote_policy.config["harness_version"] == "0.8.0"
    remote_policy.close()


def test_fake_benchmark_through_vla_eval_server_equals_in_process_under_xdist(fake: pytest.Pytester, hosted) -> None:
    server, spec = hosted(False)
    local = fake.runpytest_subprocess(*FAKE, "--policy=spy_policies:EpisodeMemory", "--vla-results=local")
    remote = fake.runpytest_subprocess(*FAKE, f"--policy={spec}", "-n", "2", "--vla-results=remote")
    assert remote.ret == local.ret and local.ret in (0, 1), remote.stdout.str()

    def comparable(root: str) -> dict[tuple[str, int], tuple[Any, ...]]:
        (run_dir,) = (fake.path / root).iterdir()
        records = episode_records(run_dir)
        return {k: (r["outcome"], r["episode_return"], r["length"]) for k, r in records.items()}

    assert comparable("remote") == comparable("local")
    assert {outcome for outcome, _, _ in comparable("local").values()} == {"success", "failure"}
    (run_dir,) = (fake.path / "remote").iterdir()
    assert {r["worker"] for r in episode_records(run_dir).values()} == {"gw0", "gw1"}
    wait_until(lambda: len(server.ended) == 6)
    assert sorted((e["metrics"]["success"], e["steps"]) for e in server.ended) == sorted(
        (outcome == "success", length) for outcome, _, length in comparable("local").values()
    )


def test_an_error_frame_and_a_dead_server_are_episode_errors() -> None:
    class Exploding(PredictModelServer):
        def predict(self, obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
            raise ValueError("broken weights")

    with start_blocking_portal() as portal:
        future, port = portal.start_task(serve_async, Exploding(), "127.0.0.1", 0)
        policy = build_policy(parse_policy(f"vla-eval://127.0.0.1:{port}?{OPTIONS}"), 7)
        with pytest.raises(PolicyError, match="served observation_failed: ValueError: broken weights"):
            executed(policy, [1])
        future.cancel()
    with pytest.raises(ServerError, match=r"lost the connection|not connected|cannot reach"):
        executed(policy, [2])
    with pytest.raises(
        ServerError, match=r"cannot reach the policy server at ws://127.0.0.1:\d+ \(kept trying for 0.3 s\)"
    ):
        build_policy(parse_policy(f"vla-eval://127.0.0.1:{port}?connect_timeout=0.3"), 7)


class RefusesSeed13(HostedPolicy):
    async def on_episode_start(self, config: dict[str, Any], ctx: Any) -> None:
        if config["task"]["seed"] == 13:
            raise RuntimeError("no weights for seed 13")
        await super().on_episode_start(config, ctx)


def test_a_failed_episode_start_errors_only_its_own_episode() -> None:
    with start_blocking_portal() as portal:
        future, port = portal.start_task(serve_async, RefusesSeed13(EpisodeMemory, False), "127.0.0.1", 0)
        policy = build_policy(parse_policy(f"vla-eval://127.0.0.1:{port}?{OPTIONS}"), 7)
        with pytest.raises(PolicyError, match="served episode_start_failed: RuntimeError: no weights for seed 13"):
            executed(policy, [13])
        ((actions, _),) = executed(policy, [3])
        np.testing.assert_array_equal(actions, executed(EpisodeMemory(), [3])[0][0])
        policy.close()
        future.cancel()


def test_our_ws_server_is_not_mistaken_for_a_vla_eval_server() -> None:
    with (
        ServerThread(parse_local_policy("spy_policies:EpisodeMemory"), ServerConfig(port=0)) as url,
        pytest.raises(ServerError, match=r"is not a vla-eval model server .*; for a vlaeval server use ws://"),
    ):
        build_policy(parse_policy(url.replace("ws://", "vla-eval://") + "?connect_timeout=5"), 7)


# -- our server, driven by vla-eval's own client -----------------------------------------------


def harness_observation(seed: int, step: int) -> dict[str, Any]:
    """An observation as vla-eval's benchmarks build it: named HWC images, state, task description."""
    rng = np.random.default_rng([seed, step])
    return {
        "images": {name: rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8) for name in ("base", "wrist")},
        "state": rng.normal(size=7).astype(np.float32),
        "task_description": "touch the cube",
    }


def in_process_actions(seed: int, steps: int) -> list[np.ndarray]:
    """What our own episode loop would execute for the same observations."""
    policy = EpisodeMemory()
    policy.reset(
        EpisodeInfo(task="Alpha-v0", seed=seed, instruction="touch the cube", episode_index=0, max_steps=steps)
    )
    pending: deque[np.ndarray] = deque()
    actions = []
    for step in range(steps):
        obs = harness_observation(seed, step)
        if not pending:
            rgb = np.concatenate(list(obs["images"].values()), axis=-1)[None]
            view = {"rgb": rgb, "proprio": obs["state"][None], "instruction": obs["task_description"]}
            pending.extend(policy.act(view))
        actions.append(pending.popleft())
    return actions


async def harness_episodes(url: str, seeds: list[int], steps: int) -> list[list[np.ndarray]]:
    """One vla-eval harness shard: its ``Connection`` runs the episodes one after another."""
    episodes = []
    async with Connection(url, timeout=60, max_retries=2, backoff_base=0.1) as conn:
        assert conn.server_info["protocol_version"] == 1 and conn.server_info["capabilities"]["episode_state"]
        for seed in seeds:
            await conn.start_episode({"task": {"name": "Alpha-v0", "seed": seed, "instruction": "touch the cube"}})
            episodes.append([(await conn.act(harness_observation(seed, step)))["actions"] for step in range(steps)])
            await conn.end_episode({"metrics": {"success": False}, "steps": steps})
    return episodes


def test_vla_evals_client_gets_the_in_process_actions_with_concurrent_episodes() -> None:
    config = ServerConfig(port=0, protocol="vla-eval", max_batch_size=8, max_wait_ms=20)
    # batched (act_batch): the server waits max_wait_ms for the other shards' requests
    thread = ServerThread(parse_local_policy("spy_policies:BatchedMemory"), config)
    shards = {0: [11, 12], 1: [13, 11], 2: [14, 15], 3: [16, 17]}  # seed 11 twice: state is reset per episode
    results: dict[int, list[list[np.ndarray]]] = {}

    async def run_shards(url: str) -> None:
        async def shard(index: int) -> None:
            results[index] = await harness_episodes(url, shards[index], steps=5)

        async with anyio.create_task_group() as group:
            for index in shards:
                group.start_soon(shard, index)

    with thread as url:
        anyio.run(run_shards, url)  # vla-eval's default image encoding: PNG
        # episode_end has no reply in vla-eval's protocol, so the last ones may still be on their way
        deadline = time.monotonic() + 10
        while (stats := thread.server.stats())["open_episodes"] and time.monotonic() < deadline:
            time.sleep(0.01)
    for index, seeds in shards.items():
        for seed, actions in zip(seeds, results[index], strict=True):
            np.testing.assert_array_equal(np.stack(actions), np.stack(in_process_actions(seed, 5)))
    assert stats["requests"] == 8 * 3, "one policy call per chunk of two, the server splitting chunks"
    assert stats["open_episodes"] == 0, "episode_end closed every episode"
    assert max(map(int, stats["batch_sizes"])) > 1, "concurrent harness shards were batched together"


def test_vla_evals_client_with_a_token_and_a_failing_policy() -> None:
    config = ServerConfig(port=0, protocol="vla-eval", token="s3cret")
    with ServerThread(parse_local_policy("spy_policies:EpisodeMemory"), config) as url:
        with pytest.raises(ConnectionError, match="unreachable"):
            anyio.run(harness_episodes, url, [1], 1)
        (actions,) = anyio.run(harness_episodes, f"{url}/?token=s3cret", [1], 3)
        np.testing.assert_array_equal(np.stack(actions), np.stack(in_process_actions(1, 3)))

    async def observation_without_episode(url: str) -> None:
        async with Connection(url, timeout=30, max_retries=1) as conn:
            await conn.act(harness_observation(0, 0))

    with (
        ServerThread(
            parse_local_policy("spy_policies:EpisodeMemory"), ServerConfig(port=0, protocol="vla-eval")
        ) as url,
        pytest.raises(RuntimeError, match="observation_failed: no episode_start on this connection"),
    ):
        anyio.run(observation_without_episode, url)


class Harness:
    """A bare vla-eval harness connection: one frame out, its reply (if any) back."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seq = 0

    def send(self, kind: str, payload: dict[str, Any]) -> int:
        self.seq += 1
        self.ws.send(pack_frame(kind, payload, self.seq))
        return self.seq

    def ask(self, kind: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        seq = self.send(kind, payload)
        reply_kind, reply, reply_seq = unpack_frame(self.ws.recv(30), 2**20)
        assert reply_seq == seq, (reply_kind, reply)
        return reply_kind, reply


def vla_eval_server(**config: Any) -> ServerThread:
    return ServerThread(parse_local_policy("zero"), ServerConfig(port=0, protocol="vla-eval", **config))


def test_a_bad_episode_start_gets_an_error_reply_and_the_connection_goes_on() -> None:
    task = {"name": "Alpha-v0", "seed": 3, "instruction": "touch the cube"}
    with vla_eval_server() as url, connect(url, compression=None, proxy=None) as ws:
        harness = Harness(ws)
        for fields, reason in [
            ({"seed": -5}, "'episode_start' needs 'seed' as an int in [0, 2**64), got -5"),
            ({"seed": "5"}, "'episode_start' needs 'seed' as int, got str"),
            ({"max_steps": 0}, "'episode_start' needs 'max_steps' as an int >= 1, got 0"),
            ({"episode_idx": -1}, "'episode_start' needs 'episode_index' as an int >= 0, got -1"),
        ]:
            assert harness.ask("episode_start", {"task": {**task, **fields}}) == (
                "error",
                {"error": f"episode_start_failed: {reason}"},
            )
        harness.send("episode_start", {"task": task})
        kind, reply = harness.ask("observation", harness_observation(3, 0))
        assert kind == "action" and np.array_equal(reply["actions"], np.zeros(7, np.float32))


def black_png(side: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((side, side), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_that_would_decode_past_the_budget_are_refused_before_decoding_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded_on: list[str] = []

    def spy(payload: dict[str, Any], seq: int, max_frame_bytes: int) -> None:
        decoded_on.append(threading.current_thread().name)
        decode_images(payload, seq, max_frame_bytes)

    monkeypatch.setattr(vla_eval_handler.wire, "decode_images", spy)
    bomb = {"__image__": True, "format": "png", "data": black_png(2000), "shape": [2000, 2000, 1]}
    assert len(bomb["data"]) < 8 * 2**10, "a few KB that declare 4 MB"
    with (
        vla_eval_server(max_message_bytes=64 * 2**10) as url,  # images may decode to 512 KiB a frame
        connect(url, compression=None, proxy=None) as ws,
    ):
        harness = Harness(ws)
        harness.send("episode_start", {"task": {"name": "Alpha-v0", "seed": 3}})
        kind, reply = harness.ask("observation", {"images": {"base": bomb}, "state": np.zeros(7, np.float32)})
        assert kind == "error" and reply["error"].startswith(
            "bad_request: the images of this frame would decode to more than 524,288 bytes "
            "(8 x the largest frame accepted): one of 4,000,000 bytes"
        ), reply
        kind, reply = harness.ask("observation", harness_observation(3, 0))  # PNG-free, and within the budget
        assert kind == "action", reply
    on_the_server = [name for name in decoded_on if name != threading.main_thread().name]  # not the harness's
    assert len(on_the_server) == 1 and on_the_server[0].startswith("vlaeval-decode"), on_the_server


def test_the_serve_command_speaks_vla_eval(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "pytest_vlaeval", "serve", "--policy", "zero", "--port", "0", "--protocol", "vla-eval"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().decode().strip()
        (actions,) = anyio.run(harness_episodes, url, [5], 2)
        np.testing.assert_array_equal(np.stack(actions), np.zeros((2, 7), dtype=np.float32))
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.long
@pytest.mark.mikasa
def test_a_real_mikasa_episode_through_vla_evals_server_equals_in_process(hosted, tmp_path: Path) -> None:
    server, spec = hosted(True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    args = ["--benchmark=short", "--vla-tasks=RememberColor3-VLA-v0", "--episodes=1", "-p", "no:cacheprovider"]

    def run(policy: str, results: str) -> dict[tuple[str, int], tuple[Any, ...]]:
        command = [sys.executable, "-m", "pytest", *args, f"--policy={policy}", f"--vla-results={results}"]
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        (run_dir,) = (tmp_path / results).iterdir()
        records = episode_records(run_dir)
        assert {r["outcome"] for r in records.values()} <= {"success", "failure"}, records
        return {key: (r["success"], r["episode_return"], r["length"]) for key, r in records.items()}

    local, remote = together(lambda: run("spy_policies:EpisodeMemory", "local"), lambda: run(spec, "remote"))
    assert remote == local
    wait_until(lambda: len(server.ended) == 1)
    ((success, _, length),) = local.values()
    assert (server.ended[0]["metrics"]["success"], server.ended[0]["steps"]) == (success, length)
    assert server.started[0]["env_id"] == "RememberColor3-VLA-v0" and server.started[0]["seed"] == 4242424242
    assert server.predictions == (length + 1) // 2
