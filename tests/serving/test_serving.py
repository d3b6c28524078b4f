"""A real policy server on a loopback port, with real websocket clients.

The server runs in a thread of this process (its own event loop), so the policies below can
record what they were called with; they are importable as ``test_serving:NAME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import resource
import select
import shlex
import socket
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import msgpack
import numpy as np
import pytest
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from pytest_vlaeval.errors import PolicyError, ServerError
from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy
from pytest_vlaeval.policy.contract import episode_rng
from pytest_vlaeval.policy.loading import parse_local_policy
from pytest_vlaeval.serving.client.connect import connect_policy
from pytest_vlaeval.serving.client.policies import RemotePolicy, RemoteTraceback
from pytest_vlaeval.serving.server import sockets as server_sockets
from pytest_vlaeval.serving.server import table as server_module
from pytest_vlaeval.serving.server.launcher import ServerProcess, ServerStartError
from pytest_vlaeval.serving.server.policy_server import PolicyServer, ServerConfig
from pytest_vlaeval.serving.server.sockets import ACCEPT_SLACK, SOCKETS_PER_CONNECTION, descriptors_needed
from pytest_vlaeval.serving.url import TOKEN_ENV, parse_remote_spec
from pytest_vlaeval.serving.wire import native as protocol

# openpi-client connects the way websockets 17 deprecates; that is its business, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
WAIT_S = 30.0
"""Upper bound for conditions polled in these tests; never a measured duration."""


# -- policies ---------------------------------------------------------------------------------


def marker_obs(marker: float, instruction: str = "echo", size: int = 4) -> dict[str, Any]:
    return {
        "rgb": np.full((1, size, size, 6), int(marker) % 256, np.uint8),
        "proprio": np.full((1, 7), marker, np.float32),
        "instruction": instruction,
    }


def nested(levels: int, leaf: Any) -> dict[str, Any]:
    """An observation of ``levels`` maps, each inside the last, ``leaf`` in the innermost."""
    obs: dict[str, Any] = {"leaf": leaf}
    for _ in range(levels - 1):
        obs = {"k": obs}
    return obs


def echo(history: list[float]) -> np.ndarray:
    """What a memory policy answers: facts about its own episode's history."""
    return np.array([[len(history), sum(history), history[0], history[-1], 0, 0, 0]] * 2, np.float32)


def client_id(episode: Any) -> str:
    """The id a client gave the episode the policy sees: the server scopes ids to their connection."""
    return episode.id.rpartition("@")[0]


class Recorder:
    """Class-level call log shared with the server thread; cleared before every test (episodes by client id)."""

    batches: ClassVar[list[list[str]]] = []
    closed: ClassVar[list[str]] = []
    entered = threading.Event()
    release = threading.Event()


def hold_on_wait(observations: list[dict[str, Any]]) -> None:
    """Keep the policy thread busy while a test queues requests, when a row's instruction is ``wait``."""
    if any(o["instruction"] == "wait" for o in observations):
        Recorder.entered.set()
        Recorder.release.wait(WAIT_S)


class EchoMemory:
    """A memory policy without ``act_batch``: its history lives on the instance."""

    chunk_size = 2

    def reset(self, episode: EpisodeInfo) -> None:
        self.history: list[float] = []

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        hold_on_wait([obs])
        self.history.append(float(obs["proprio"][0, 0]))
        return echo(self.history)


class BatchedEchoMemory(EchoMemory):
    """The same memory policy with ``act_batch``: its history lives in each episode's state."""

    def open_episode(self, episode: Any) -> None:
        episode.state["history"] = []

    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> np.ndarray:
        Recorder.batches.append([client_id(e) for e in episodes])
        hold_on_wait(observations)
        rows = []
        for episode, obs in zip(episodes, observations, strict=True):
            episode.state["history"].append(float(obs["proprio"][0, 0]))
            rows.append(echo(episode.state["history"]))
        return np.stack(rows)

    def close_episode(self, episode: Any) -> None:
        Recorder.closed.append(client_id(episode))


class SeededNoise:
    """Batched, and random: each episode draws from its own RNG."""

    chunk_size = 3

    def reset(self, episode: EpisodeInfo) -> None:
        self.rng = episode_rng(episode)

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return self.rng.uniform(-1, 1, (3, 7))

    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> list[np.ndarray]:
        Recorder.batches.append([client_id(e) for e in episodes])
        return [e.rng.uniform(-1, 1, (3, 7)) for e in episodes]


class Faulty:
    """Batched: raises when any row is poisoned; returns NaN for a row that asks for it."""

    chunk_size = 1

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        if obs["instruction"] == "poison":
            raise RuntimeError("poisoned observation")
        return np.zeros(7)

    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> np.ndarray:
        Recorder.batches.append([client_id(e) for e in episodes])
        if any(o["instruction"] == "poison" for o in observations):
            raise RuntimeError("poisoned observation")
        return np.array([[[np.nan if o["instruction"] == "nan" else 0.0] * 7] for o in observations])


class PlainFaulty(Faulty):
    act_batch = None  # type: ignore[assignment]


class Unconvertible:
    """What a broken model returns: an array-like whose conversion itself raises."""

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise RuntimeError("weights on a device that is gone")


class BadRowForOneTask(Faulty):
    """Batched: a usable chunk for every row except the one asking for ``bad output``."""

    def act_batch(self, episodes: list[Any], observations: list[dict[str, Any]]) -> list[Any]:
        Recorder.batches.append([client_id(e) for e in episodes])
        hold_on_wait(observations)
        return [Unconvertible() if o["instruction"] == "bad output" else np.zeros((1, 7)) for o in observations]


class PlainBadRowForOneTask(BadRowForOneTask):
    act_batch = None  # type: ignore[assignment]

    def act(self, obs: dict[str, Any]) -> Any:
        hold_on_wait([obs])
        return Unconvertible() if obs["instruction"] == "bad output" else np.zeros(7)


def slow_loading_policy() -> RandomPolicy:
    Recorder.release.wait(WAIT_S)
    return RandomPolicy()


# -- fixtures ---------------------------------------------------------------------------------


class ThreadServer:
    """A ``PolicyServer`` on 127.0.0.1 with its own event loop in a daemon thread."""

    def __init__(self, spec: str, load: bool = True, **config: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = PolicyServer(parse_local_policy(spec), ServerConfig(port=config.pop("port", 0), **config))
        self.call(self.server.start())
        self.url = self.server.url
        if load:
            self.call(self.server.load())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    def stats(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            return self.server.stats()

        return self.call(read())

    def wait_for(self, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while not condition(stats := self.stats()):
            assert time.monotonic() < deadline, f"server never reached the expected state: {stats}"
            time.sleep(0.01)
        return stats

    def close(self) -> None:
        if self.thread.is_alive():
            self.call(self.server.stop())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT_S)


@pytest.fixture
def start_server() -> Iterator[Callable[..., ThreadServer]]:
    Recorder.batches.clear()
    Recorder.closed.clear()
    Recorder.entered.clear()
    Recorder.release.clear()
    servers: list[ThreadServer] = []

    def start(spec: str, **config: Any) -> ThreadServer:
        servers.append(ThreadServer(spec, **config))
        return servers[-1]

    yield start
    Recorder.release.set()
    for server in servers:
        server.close()


def episode(seed: int, task: str = "Task-v0") -> EpisodeInfo:
    return EpisodeInfo(task=task, seed=seed, instruction="echo", episode_index=0, max_steps=50)


def client(url: str, action_dim: int = 7, **options: float) -> RemotePolicy:
    query = "&".join(f"{k}={v}" for k, v in {"timeout": WAIT_S, "connect_timeout": 5, **options}.items())
    policy = connect_policy(parse_remote_spec(f"{url}?{query}"), action_dim)
    assert isinstance(policy, RemotePolicy)
    return policy


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads; results in order, the first exception re-raised."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(work, range(count)))


def queued_behind_a_busy_policy(server: ThreadServer, count: int, work: Callable[[int], Any]) -> list[Any]:
    """``in_threads(count, work)`` while another episode's request holds the policy thread until
    ``count`` requests wait: their first requests are one batch however fast the policy is (a policy
    without ``act_batch`` never waits for batch mates). Their episodes must be open already (an open
    needs the policy thread too)."""
    holder = client(server.url)
    holder.reset(episode(99))
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(holder.act, marker_obs(0, "wait"))
        assert Recorder.entered.wait(WAIT_S)
        results = pool.submit(in_threads, count, work)
        server.wait_for(lambda stats: stats["queued_requests"] == count)
        Recorder.release.set()
        held.result(WAIT_S)
        holder.close()
        return results.result(WAIT_S)


@contextlib.contextmanager
def raw(url: str) -> Iterator[ClientConnection]:
    """A bare websocket client, past the server's metadata frame."""
    with connect(url, compression=None, proxy=None) as ws:
        protocol.parse(ws.recv(WAIT_S), {"metadata": protocol.REPLY_FIELDS["metadata"]})
        yield ws


def ask(ws: ClientConnection, message: dict[str, Any] | bytes | str) -> dict[str, Any]:
    ws.send(protocol.pack(message) if isinstance(message, dict) else message)
    return protocol.unpack(ws.recv(WAIT_S))


def http_get(url: str, query: str = "") -> tuple[int, str]:
    try:
        with NO_PROXY.open("http" + url.removeprefix("ws") + "/healthz" + query, timeout=WAIT_S) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- batching ---------------------------------------------------------------------------------


def test_waiting_episodes_are_served_in_one_batch(start_server) -> None:
    server = start_server("test_serving:BatchedEchoMemory", max_batch_size=4, max_wait_ms=60_000)
    policies = [client(server.url) for _ in range(4)]
    opened = threading.Barrier(4)

    def run(i: int) -> np.ndarray:
        policies[i].reset(episode(i))
        opened.wait(WAIT_S)  # all four are open before any asks, so all four wait together
        return policies[i].act(marker_obs(i))

    assert [chunk[0, 2] for chunk in in_threads(4, run)] == [0, 1, 2, 3]
    assert [len(batch) for batch in Recorder.batches] == [4]
    assert server.stats()["batch_sizes"] == {"4": 1}


def test_a_policy_without_act_batch_never_waits_for_batch_mates(start_server) -> None:
    """Its rows are computed one at a time anyway: a request goes out at once, although another
    open episode could still join it within the (here very long) wait."""
    server = start_server("test_serving:EchoMemory", max_batch_size=4, max_wait_ms=60_000)
    waiting, asking = client(server.url), client(server.url, timeout=5)
    waiting.reset(episode(0))
    asking.reset(episode(1))
    began = time.monotonic()
    assert asking.act(marker_obs(7))[0, 1] == 7
    assert time.monotonic() - began < 5
    assert server.stats()["batch_sizes"] == {"1": 1}


def test_the_next_batch_is_collected_while_one_runs(start_server) -> None:
    server = start_server("test_serving:BatchedEchoMemory", max_batch_size=8, max_wait_ms=20)
    policies = [client(server.url) for _ in range(4)]
    for i, policy in enumerate(policies):
        policy.reset(episode(i))
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(policies[0].act, marker_obs(0, "wait"))
        assert Recorder.entered.wait(WAIT_S), "the first request never reached the policy"
        rest = [pool.submit(policies[i].act, marker_obs(i)) for i in (1, 2, 3)]
        server.wait_for(lambda stats: stats["queued_requests"] == 3)
        Recorder.release.set()
        assert first.result(WAIT_S)[0, 2] == 0 and [f.result(WAIT_S)[0, 2] for f in rest] == [1, 2, 3]
    assert [len(batch) for batch in Recorder.batches] == [1, 3]


@pytest.mark.parametrize("spec", ["test_serving:BatchedEchoMemory", "test_serving:EchoMemory"])
def test_episode_memory_never_leaks_into_batch_mates(start_server, spec: str) -> None:
    server = start_server(spec, max_batch_size=4, max_wait_ms=200)
    count, steps = 6, 4
    policies = [client(server.url) for _ in range(count)]
    for i, policy in enumerate(policies):
        policy.reset(episode(i))
    together = threading.Barrier(count)

    def run(i: int) -> list[np.ndarray]:
        replies = []
        for step in range(steps):
            together.wait(WAIT_S)
            replies.append(policies[i].act(marker_obs(100 * i + step)))
        return replies

    for i, replies in enumerate(queued_behind_a_busy_policy(server, count, run)):
        for step, reply in enumerate(replies):
            own = [100.0 * i + s for s in range(step + 1)]
            assert np.array_equal(reply, echo(own)), f"episode {i} step {step} saw another episode's memory"
    stats = server.stats()
    assert stats["requests"] == count * steps + 1 and max(int(size) for size in stats["batch_sizes"]) == 4
    ids = {policy._episode for policy in policies}
    for policy in policies:
        policy.close()
    server.wait_for(lambda stats: stats["open_episodes"] == 0)
    if spec.endswith("BatchedEchoMemory"):  # every episode's state is freed on close
        server.wait_for(lambda stats: ids <= set(Recorder.closed))


def test_per_episode_rng_makes_results_independent_of_batch_mates(start_server) -> None:
    batched = start_server("test_serving:SeededNoise", max_batch_size=8, max_wait_ms=2_000)
    exact = start_server("test_serving:SeededNoise", max_batch_size=1)
    count, steps = 4, 3
    policies = [client(batched.url) for _ in range(count)]
    together = threading.Barrier(count)

    def run(i: int) -> list[np.ndarray]:
        policies[i].reset(episode(7 + i))
        together.wait(WAIT_S)
        return [policies[i].act(marker_obs(i)) for _ in range(steps)]

    shared = in_threads(count, run)
    assert max(len(batch) for batch in Recorder.batches) > 1
    alone = client(exact.url)
    for i in range(count):
        alone.reset(episode(7 + i))
        expected = episode_rng(episode(7 + i))
        for chunk in shared[i]:
            assert np.array_equal(alone.act(marker_obs(i)), chunk)
            assert np.array_equal(expected.uniform(-1, 1, (3, 7)).astype(np.float32), chunk)
    assert exact.stats()["batch_sizes"] == {"1": count * steps}


# -- faults stay local ------------------------------------------------------------------------


def test_a_policy_exception_fails_only_the_episodes_of_its_batch(start_server) -> None:
    server = start_server("test_serving:Faulty", max_batch_size=2, max_wait_ms=200)
    policies = [client(server.url) for _ in range(3)]
    together = threading.Barrier(3)
    ids: list[str] = []

    def run(i: int) -> Exception | np.ndarray:
        policies[i].reset(episode(i))
        ids.append(policies[i]._episode)
        together.wait(WAIT_S)
        try:
            return policies[i].act(marker_obs(i, "poison" if i == 0 else "ok"))
        except PolicyError as exc:
            return exc

    outcomes = in_threads(3, run)
    poisoned = next(batch for batch in Recorder.batches if policies[0]._episode in batch)
    for policy, outcome in zip(policies, outcomes, strict=True):
        if policy._episode in poisoned:
            assert isinstance(outcome, PolicyError)
            assert str(outcome) == "served policy.act_batch raised RuntimeError: poisoned observation"
            assert isinstance(outcome.__cause__, RemoteTraceback)
            assert "RuntimeError: poisoned observation" in "".join(traceback.format_exception(outcome.__cause__))
        else:
            assert isinstance(outcome, np.ndarray) and outcome.shape == (1, 7)
    assert 1 <= sum(isinstance(o, np.ndarray) for o in outcomes) <= 2
    # The server goes on serving every episode, the failed ones included.
    assert all(policy.act(marker_obs(9)).shape == (1, 7) for policy in policies)
    # An invalid row fails its own episode only, whatever shared its batch.
    policies[0].reset(episode(0))
    policies[1].reset(episode(1))
    replies = in_threads(2, lambda i: _outcome(policies[i], marker_obs(i, "nan" if i == 0 else "ok")))
    assert isinstance(replies[0], PolicyError) and "NaN" in str(replies[0])
    assert isinstance(replies[1], np.ndarray)


def _outcome(policy: RemotePolicy, obs: dict[str, Any]) -> Exception | np.ndarray:
    try:
        return policy.act(obs)
    except PolicyError as exc:
        return exc


def test_a_policy_without_act_batch_fails_only_the_faulty_request(start_server) -> None:
    server = start_server("test_serving:PlainFaulty", max_batch_size=4, max_wait_ms=2_000)
    policies = [client(server.url) for _ in range(2)]
    together = threading.Barrier(2)

    def run(i: int) -> Exception | np.ndarray:
        policies[i].reset(episode(i))
        together.wait(WAIT_S)
        return _outcome(policies[i], marker_obs(i, "poison" if i == 0 else "ok"))

    failed, served = in_threads(2, run)
    assert str(failed) == "served policy.act raised RuntimeError: poisoned observation"
    assert isinstance(served, np.ndarray)


@pytest.mark.parametrize("spec", ["test_serving:BadRowForOneTask", "test_serving:PlainBadRowForOneTask"])
def test_an_unusable_row_fails_only_its_own_episode_blamed_on_the_policy(start_server, spec: str) -> None:
    server = start_server(spec, max_batch_size=2, max_wait_ms=10_000)
    policies = [client(server.url) for _ in range(2)]
    for i, policy in enumerate(policies):
        policy.reset(episode(i))

    def run(i: int) -> Exception | np.ndarray:
        return _outcome(policies[i], marker_obs(i, "bad output" if i == 0 else "ok"))

    bad, good = queued_behind_a_busy_policy(server, 2, run)
    assert server.stats()["batch_sizes"] == {"1": 1, "2": 1}, "both rows shared one batch"
    assert isinstance(bad, PolicyError) and "server fault" not in str(bad), bad
    assert "weights on a device that is gone" in str(bad)
    assert isinstance(good, np.ndarray) and good.shape == (1, 7)


def test_garbage_frames_get_error_replies_and_the_connection_keeps_serving(start_server) -> None:
    server = start_server("random")
    bystander = client(server.url)
    bystander.reset(episode(1))
    with raw(server.url) as ws:
        object_array = {b"__ndarray__": True, b"data": b"", b"dtype": "|O", b"shape": [0]}
        garbage = [
            (b"\xc1\xc1", "not a msgpack message"),
            ("hello", "expected a binary frame"),
            (msgpack.packb([1, 2]), "expected a msgpack map, got list"),
            ({"type": "fly"}, "unknown message type 'fly'"),
            ({"type": "act", "episode": "e"}, "'act' needs 'step' as int"),
            (msgpack.packb({"type": "act", "episode": "e", "step": 0, "obs": {"x": object_array}}), "dtype must be"),
            (
                {"type": "act", "episode": "nobody", "step": 0, "obs": {}},
                "episode nobody is not open on this connection",
            ),
        ]
        for frame, reason in garbage:
            reply = ask(ws, frame)
            assert reply["type"] == "error" and reason in reply["message"], reply
        info = episode(3).to_dict()
        assert ask(ws, {"type": "open", "episode": "e1", **info})["type"] == "opened"
        assert ask(ws, {"type": "open", "episode": "e1", **info})["message"] == "episode e1 is already open"
        reply = ask(ws, {"type": "act", "episode": "e1", "step": 5, "obs": marker_obs(1)})
        assert reply["type"] == "actions" and reply["actions"].shape == (1, 7)
        assert ask(ws, {"type": "act", "episode": "e1", "step": 3, "obs": marker_obs(1)})["message"] == (
            "step 3 goes back from step 5"
        )
        assert ask(ws, {"type": "close", "episode": "e1"})["type"] == "closed"
        assert bystander.act(marker_obs(1)).shape == (1, 7)


def test_a_second_request_in_flight_for_one_episode_is_refused(start_server) -> None:
    server = start_server("test_serving:BatchedEchoMemory")
    with raw(server.url) as ws:
        assert ask(ws, {"type": "open", "episode": "e", **episode(1).to_dict()})["type"] == "opened"
        ws.send(protocol.pack({"type": "act", "episode": "e", "step": 0, "obs": marker_obs(1, "wait")}))
        assert Recorder.entered.wait(WAIT_S)
        busy = ask(ws, {"type": "act", "episode": "e", "step": 1, "obs": marker_obs(2)})
        assert (busy["code"], busy["message"]) == (protocol.BUSY, "episode e already has a request in flight")
        Recorder.release.set()
        reply = protocol.unpack(ws.recv(WAIT_S))
        assert (reply["type"], reply["step"], reply["actions"][0, 2]) == ("actions", 0, 1.0)


def test_oversized_frames_close_only_their_connection(start_server) -> None:
    server = start_server("random", max_message_bytes=8_000)
    bystander = client(server.url)
    bystander.reset(episode(1))
    with raw(server.url) as ws:
        ws.send(b"\x00" * 20_000)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(WAIT_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        big = marker_obs(1, size=64)
        with pytest.raises(ServerError, match=r"the act message of \d+ bytes exceeds the server's limit of 8000"):
            bystander.act(big)
        assert bystander.act(marker_obs(1)).shape == (1, 7)


def test_token_auth(start_server, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_server("random", token="s3cret")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ServerError, match=f"HTTP 401 \\(set {TOKEN_ENV} to the server's token\\)"):
        client(server.url)
    monkeypatch.setenv(TOKEN_ENV, "wrong")
    with pytest.raises(ServerError, match=f"HTTP 401 \\({TOKEN_ENV} is wrong\\)"):
        client(server.url)
    assert http_get(server.url) == (401, "missing or wrong token\n"), "health says nothing without the token"
    assert http_get(server.url, "?token=s3cret")[0] == 200
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    policy = client(server.url)
    policy.reset(episode(1))
    assert policy.act(marker_obs(1)).shape == (1, 7)
    openpi = WebsocketClientPolicy("127.0.0.1", server.server.port, api_key="s3cret")
    assert openpi.get_server_metadata()["protocol"] == "vlaeval", "openpi's Api-Key header is accepted too"


def test_two_authorization_headers_are_a_bad_request_not_a_server_fault(start_server) -> None:
    server = start_server("random", token="s3cret")
    both = [("Authorization", "Bearer s3cret"), ("Authorization", "Bearer wrong")]
    with pytest.raises(InvalidStatus) as refused:
        connect(server.url, additional_headers=both, compression=None, proxy=None, open_timeout=WAIT_S)
    assert (refused.value.response.status_code, refused.value.response.body) == (
        400,
        b"more than one Authorization header\n",
    )
    with connect(server.url, additional_headers=both[:1], compression=None, proxy=None, open_timeout=WAIT_S) as ws:
        assert protocol.unpack(ws.recv(WAIT_S))["type"] == "metadata", "one header is fine"


def test_an_episode_id_is_its_connections_own_and_reveals_nothing_of_another(start_server) -> None:
    server = start_server("test_serving:BatchedEchoMemory")
    info = episode(1).to_dict()
    with raw(server.url) as mine, raw(server.url) as theirs:
        assert ask(theirs, {"type": "open", "episode": "e1", **info})["type"] == "opened"
        assert ask(mine, {"type": "open", "episode": "e1", **info})["type"] == "opened", "nobody else's e1 shows"
        for ws, marker in ((mine, 5), (theirs, 7)):
            reply = ask(ws, {"type": "act", "episode": "e1", "step": 0, "obs": marker_obs(marker)})
            assert reply["actions"][0, :3].tolist() == [1, marker, marker], "each e1 has its own memory"
        assert ask(mine, {"type": "close", "episode": "e1"})["type"] == "closed"
        reply = ask(theirs, {"type": "act", "episode": "e1", "step": 1, "obs": marker_obs(8)})
        assert reply["actions"][0, :3].tolist() == [2, 15, 7], "closing mine left theirs open"
        reply = ask(mine, {"type": "act", "episode": "e1", "step": 1, "obs": marker_obs(8)})
        assert (reply["code"], reply["message"]) == (
            protocol.UNKNOWN_EPISODE,
            "episode e1 is not open on this connection",
        )


def test_sockets_that_never_finish_their_handshake_are_bounded(start_server) -> None:
    server = start_server("random", max_connections=2)
    bound = SOCKETS_PER_CONNECTION * 2
    silent = [socket.create_connection(("127.0.0.1", server.server.port), timeout=WAIT_S) for _ in range(bound + 8)]
    closed: set[socket.socket] = set()
    try:
        deadline = time.monotonic() + 5.0  # well before the 10 s handshake timeout would close them
        while len(closed) < 8 and time.monotonic() < deadline:
            readable, _, _ = select.select([s for s in silent if s not in closed], [], [], 0.1)
            for sock in readable:
                with contextlib.suppress(ConnectionResetError):
                    if sock.recv(1):
                        continue
                closed.add(sock)
        assert len(closed) == 8, f"{len(closed)} of the 8 sockets past the bound were closed at once"
        assert server.wait_for(lambda stats: stats["open_sockets"] == bound)["open_connections"] == 0
    finally:
        for sock in silent:
            sock.close()
    server.wait_for(lambda stats: stats["open_sockets"] == 0)
    policy = client(server.url)
    policy.reset(episode(1))
    assert policy.act(marker_obs(1)).shape == (1, 7)


def test_a_full_server_makes_room_by_closing_the_oldest_silent_socket(
    start_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer to a full server takes the place of the oldest socket silent past the grace; a
    socket within its grace keeps its place, and so does a connection that spoke, however old."""
    monkeypatch.setattr(server_sockets, "SILENT_GRACE_S", WAIT_S)
    server = start_server("random", max_connections=1)
    address = ("127.0.0.1", server.server.port)
    with raw(server.url) as speaking, socket.create_connection(address, timeout=WAIT_S) as silent:
        server.wait_for(lambda stats: stats["open_sockets"] == SOCKETS_PER_CONNECTION)
        with socket.create_connection(address, timeout=WAIT_S) as early:
            assert closed_by_server(early), "the silent socket is within its grace: the newcomer is closed at once"
        monkeypatch.setattr(server_sockets, "SILENT_GRACE_S", 0.0)
        assert http_get(server.url)[0] == 200
        assert closed_by_server(silent), "the silent socket made room for the health check"
        assert ask(speaking, {"type": "open", "episode": "e1", **episode(1).to_dict()})["type"] == "opened"
        server.wait_for(lambda stats: stats["open_sockets"] == 1)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (it never sent anything); waits up to the socket's timeout."""
    with contextlib.suppress(ConnectionResetError):
        return sock.recv(1) == b""
    return True


# -- admission, idle episodes, health ---------------------------------------------------------


def test_opens_beyond_max_episodes_wait_for_a_free_slot(start_server) -> None:
    server = start_server("random", max_episodes=2, admission_timeout_s=WAIT_S)
    first, second, third = (client(server.url) for _ in range(3))
    first.reset(episode(1))
    second.reset(episode(2))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(third.reset, episode(3))
        server.wait_for(lambda stats: stats["waiting_opens"] == 1)
        assert not waiting.done()
        first.close()
        waiting.result(WAIT_S)
    assert third.act(marker_obs(3)).shape == (1, 7)
    assert server.stats()["open_episodes"] == 2


def test_every_bad_request_gets_a_reply_and_every_slot_comes_back(
    start_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server("random", max_episodes=2, admission_timeout_s=0.5)
    info = episode(1).to_dict()
    bad_opens = [
        ({"seed": -1}, "'open' needs 'seed' as an int in [0, 2**64), got -1"),
        ({"max_steps": 0}, "'open' needs 'max_steps' as an int >= 1, got 0"),
        ({"episode_index": -2}, "'open' needs 'episode_index' as an int >= 0, got -2"),
        ({"episode": ""}, "'open' needs 'episode' as a non-empty id of at most 128 characters"),
        ({"task": ""}, "'open' needs 'task' as a non-empty name"),
    ]
    with raw(server.url) as ws:
        for _ in range(3):  # more bad opens than there are slots
            for fields, reason in bad_opens:
                reply = ask(ws, {"type": "open", "episode": "bad", **info, **fields})
                assert reply["code"] == protocol.BAD_REQUEST and reason in reply["message"], reply
        assert ask(ws, {"type": "open", "episode": "e", **info})["type"] == "opened"
        for obs, reason in [
            ({}, None),
            ({"pixels": {"top": np.zeros(2)}}, None),  # a dict of cameras passes the check
            ({b"x": np.zeros(2)}, "'act' needs 'obs' as a map of names to arrays, strings, numbers or such maps"),
            ({"x": [1, 2]}, "'act' needs 'obs' as a map of names to arrays, strings, numbers or such maps"),
            ({"x": {str(i): 0 for i in range(1025)}}, "'act' needs 'obs' as a map of at most 1,024 names"),
            (nested(33, np.zeros(2)), "'act' needs 'obs' as a map nested at most 32 deep, got deeper at 'k.k.k."),
        ]:
            step = -1 if reason is None else 0
            reply = ask(ws, {"type": "act", "episode": "e", "step": step, "obs": obs})
            assert (reason or "'act' needs 'step' as an int >= 0, got -1") in reply["message"], reply
        reply = ask(ws, {"type": "act", "episode": "e", "step": 0, "obs": nested(6, np.zeros(2))})
        assert reply["type"] == "actions", "maps nest as the env gives them: deeper than any benchmark's today"
        assert ask(ws, {"type": "close", "episode": "e"})["type"] == "closed"
        # a fault past admission, where the episode is made
        monkeypatch.setattr(server_module, "BatchEpisode", lambda episode_id, info: 1 / 0)
        for _ in range(3):
            reply = ask(ws, {"type": "open", "episode": "doomed", **info})
            assert (reply["code"], reply["episode"]) == (protocol.SERVER, "doomed")
            assert "ZeroDivisionError" in reply["message"]
        monkeypatch.undo()
    holders = [client(server.url) for _ in range(2)]
    for seed, holder in enumerate(holders):
        holder.reset(episode(seed))  # both slots are free again
    assert server.stats()["open_episodes"] == 2


def test_an_open_that_waits_too_long_fails_clearly(start_server) -> None:
    server = start_server("random", max_episodes=1, admission_timeout_s=0.2)
    holder, late = client(server.url), client(server.url)
    holder.reset(episode(1))
    with pytest.raises(ServerError, match=r"no free episode slot within 0.2 s: 1 episodes are open \(max-episodes 1\)"):
        late.reset(episode(2))
    assert holder.act(marker_obs(1)).shape == (1, 7)


def test_idle_episodes_are_closed_and_their_state_freed(start_server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pytest_vlaeval.serving")
    server = start_server("test_serving:BatchedEchoMemory", idle_timeout_s=0.2)
    policy = client(server.url)
    policy.reset(episode(5))
    # The state is freed on the policy thread, just after the episode leaves the books.
    server.wait_for(lambda stats: stats["reaped_episodes"] == 1 and policy._episode in Recorder.closed)
    assert server.stats()["open_episodes"] == 0
    assert re.search(rf"closed episode {policy._episode}@\d+ \(Task-v0 seed 5\) after", caplog.text), caplog.text
    with pytest.raises(ServerError, match=r"was closed by the server after 0.2 s without a request"):
        policy.act(marker_obs(1))


def test_health_answers_once_the_policy_is_loaded(start_server) -> None:
    server = start_server("test_serving:slow_loading_policy", load=False)
    status, body = http_get(server.url)
    assert (status, body) == (503, "loading the policy\n")
    with pytest.raises(ServerError, match=r"HTTP 503 \(the policy is still loading\)"):
        client(server.url, connect_timeout=0.2)
    loading = asyncio.run_coroutine_threadsafe(server.server.load(), server.loop)
    Recorder.release.set()
    loading.result(WAIT_S)
    status, body = http_get(server.url)
    assert (
        status == 200
        and json.loads(body)["status"] == "ok"
        and json.loads(body)["policy"] == "test_serving:slow_loading_policy"
    )


# -- client-side failures are server errors ---------------------------------------------------


def test_a_dead_server_is_a_server_error() -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"cannot reach the policy server at {url} \\(kept trying for 0.3 s\\)"):
        client(url, connect_timeout=0.3)


def test_a_reply_timeout_is_a_server_error_and_the_next_episode_reconnects(start_server) -> None:
    server = start_server("test_serving:BatchedEchoMemory")
    policy = client(server.url, timeout=0.3)
    policy.reset(episode(1))
    with pytest.raises(ServerError, match=r"no reply from .* within 0.3 s"):
        policy.act(marker_obs(1, "wait"))
    Recorder.release.set()
    server.wait_for(lambda stats: stats["open_episodes"] == 0)  # the dropped connection freed it
    policy.reset(episode(2))
    assert policy.act(marker_obs(4))[0, 2] == 4


def test_reconnects_with_backoff_after_a_server_restart(start_server) -> None:
    first = start_server("random")
    port = first.server.port
    policy = client(first.url, connect_timeout=WAIT_S)
    policy.reset(episode(11))
    policy.act(marker_obs(1))
    first.close()
    with pytest.raises(ServerError, match="lost the connection"):
        policy.act(marker_obs(1))
    restarted = threading.Timer(0.3, lambda: start_server("random", port=port))
    restarted.start()  # the client retries while nothing listens yet
    policy.reset(episode(11))
    restarted.join()
    reference = RandomPolicy()
    reference.reset(episode(11))
    assert np.array_equal(policy.act(marker_obs(1)), reference.act({}))


def test_the_client_checks_the_servers_metadata(start_server) -> None:
    server = start_server("random", action_dim=6)
    with pytest.raises(PolicyError, match="returns 6-dim actions; this benchmark needs 7"):
        client(server.url)
    assert client(server.url, action_dim=6).chunk_size == 1


# -- openpi, both ways ------------------------------------------------------------------------


def test_openpi_client_against_our_server(start_server) -> None:
    server = start_server("test_serving:Faulty", protocol="openpi", max_batch_size=4, max_wait_ms=2_000)
    clients = [WebsocketClientPolicy("127.0.0.1", server.server.port) for _ in range(3)]
    metadata = clients[0].get_server_metadata()
    assert (metadata["chunk_size"], metadata["action_dim"], metadata["protocol"]) == (1, 7, "openpi")
    together = threading.Barrier(3)

    def infer(i: int) -> dict[str, Any]:
        together.wait(WAIT_S)
        return clients[i].infer({"proprio": np.zeros((1, 7), np.float32), "prompt": "ok"})

    for result in in_threads(3, infer):
        assert result["actions"].shape == (1, 7) and result["actions"].dtype == np.float32
    assert max(len(batch) for batch in Recorder.batches) > 1, "concurrent openpi clients share batches"
    with pytest.raises(RuntimeError, match="poisoned observation"):
        clients[0].infer({"prompt": "poison"})
    assert clients[0].infer({"prompt": "ok"})["actions"].shape == (1, 7)
    assert server.stats()["open_episodes"] == 0, "openpi mode is stateless: nothing stays open"


class OpensBadly(BatchedEchoMemory):
    """Fails to open an episode prompted ``refuse``."""

    def open_episode(self, episode: Any) -> None:
        if episode.info.instruction == "refuse":
            raise RuntimeError("cannot open this one")
        super().open_episode(episode)


@pytest.mark.parametrize("spec", ["test_serving:EchoMemory", "test_serving:BatchedEchoMemory"])
def test_openpi_requests_are_one_step_episodes_opened_and_closed_by_their_batch(start_server, spec: str) -> None:
    """Every openpi observation is a fresh episode (a memory policy remembers one step), opened and
    closed once, in the one policy call of the batch that serves it, batched with other clients'."""
    server = start_server(spec, protocol="openpi", max_batch_size=4, max_wait_ms=2_000)
    clients = [WebsocketClientPolicy("127.0.0.1", server.server.port) for _ in range(3)]
    together = threading.Barrier(3)

    def infer(i: int) -> dict[str, Any]:
        together.wait(WAIT_S)
        return clients[i].infer({"proprio": np.full((1, 7), i + 1.0, np.float32), "prompt": "ok"})

    for _ in range(2):
        for i, result in enumerate(in_threads(3, infer)):
            assert result["actions"][0, :4].tolist() == [1, i + 1, i + 1, i + 1], "a one-step episode of its own"
    if spec.endswith("BatchedEchoMemory"):
        assert max(len(batch) for batch in Recorder.batches) > 1, "concurrent openpi clients share batches"
        assert len(Recorder.closed) == sum(len(batch) for batch in Recorder.batches) == 6, "each closed once"
    assert server.stats()["open_episodes"] == 0


def test_an_openpi_episode_that_fails_to_open_gets_the_error_and_its_batch_is_served(start_server) -> None:
    server = start_server("test_serving:OpensBadly", protocol="openpi", max_batch_size=4, max_wait_ms=2_000)
    clients = [WebsocketClientPolicy("127.0.0.1", server.server.port) for _ in range(2)]
    together = threading.Barrier(2)

    def infer(i: int) -> dict[str, Any] | str:
        together.wait(WAIT_S)
        try:
            return clients[i].infer({"proprio": np.ones((1, 7), np.float32), "prompt": ("ok", "refuse")[i]})
        except RuntimeError as exc:
            return str(exc)

    served, refused = in_threads(2, infer)
    assert isinstance(served, dict) and served["actions"][0, 0] == 1
    assert isinstance(refused, str) and "open_episode raised RuntimeError: cannot open this one" in refused
    (alone,) = Recorder.batches  # one batch, of the other row alone
    assert len(alone) == 1 and alone[0] in Recorder.closed
    assert len(set(Recorder.closed)) == len(Recorder.closed) == 2, "each closed once, the one that failed to open too"
    assert clients[1].infer({"proprio": np.ones((1, 7), np.float32), "prompt": "ok"})["actions"].shape == (2, 7)
    assert server.stats()["open_episodes"] == 0


def test_openpi_mode_answers_a_malformed_observation_and_keeps_serving(start_server) -> None:
    server = start_server("random", protocol="openpi")
    with connect(server.url, compression=None, proxy=None) as ws:
        ws.recv(WAIT_S)  # metadata
        for bad in ({b"rgb": np.zeros(2)}, {"rgb": [1, 2]}):
            ws.send(protocol.pack(bad))
            reply = ws.recv(WAIT_S)
            assert reply.startswith(
                "bad request: an observation must be a map of names to arrays, strings, numbers or such maps"
            )
        ws.send(protocol.pack({"prompt": "ok", "proprio": np.zeros((1, 7), np.float32)}))
        assert protocol.unpack(ws.recv(WAIT_S))["actions"].shape == (1, 7)


class MiniOpenpiServer:
    """A minimal openpi-style server: metadata on connect, ``actions`` per observation, text on error."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(WAIT_S)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _start(self) -> Any:
        return await serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)

    async def _handle(self, ws: ServerConnection) -> None:
        await ws.send(msgpack_numpy.packb({"reset_pose": [0.0] * 7}))
        async for frame in ws:
            obs = msgpack_numpy.unpackb(frame)
            self.seen.append(obs)
            if obs["prompt"] == "fail":
                await ws.send("Traceback (most recent call last):\nValueError: bad prompt")
                await ws.close(1011, "internal error")
                return
            horizon = np.tile(np.arange(10, dtype=np.float32)[:, None], (1, 7))
            await ws.send(msgpack_numpy.packb({"actions": horizon, "policy_timing": {"infer_ms": 1.0}}))

    def close(self) -> None:
        self.server.close()
        asyncio.run_coroutine_threadsafe(self.server.wait_closed(), self.loop).result(WAIT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)


@pytest.fixture
def openpi_server() -> Iterator[MiniOpenpiServer]:
    server = MiniOpenpiServer()
    yield server
    server.close()


@pytest.mark.torch
def test_our_openpi_client_against_an_openpi_style_server(openpi_server: MiniOpenpiServer) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(PolicyError, match=r"does not say how many actions to execute per inference; add \?chunk_size"):
        connect_policy(parse_remote_spec(f"openpi://127.0.0.1:{openpi_server.port}"), 7)
    policy = connect_policy(
        parse_remote_spec(f"openpi://127.0.0.1:{openpi_server.port}?chunk_size=4&timeout={WAIT_S}"), 7
    )
    assert (policy.chunk_size, policy.name) == (4, "openpi")
    policy.reset(episode(1))
    obs = marker_obs(3, "pick the cube")
    actions = policy.act({**obs, "rgb": torch.as_tensor(obs["rgb"])})  # tensors, as MIKASA gives
    assert actions.shape == (4, 7) and np.array_equal(actions[:, 0], [0, 1, 2, 3]), "the first chunk_size actions"
    seen = openpi_server.seen[-1]
    assert seen["prompt"] == "pick the cube" and "instruction" not in seen
    assert isinstance(seen["rgb"], np.ndarray) and np.array_equal(seen["rgb"], obs["rgb"])
    with pytest.raises(PolicyError, match="the openpi server failed: ValueError: bad prompt") as failed:
        policy.act(marker_obs(1, "fail"))
    assert "Traceback" in str(failed.value.__cause__)
    policy.reset(episode(2))  # openpi servers close after an error: the next episode reconnects
    assert policy.act(marker_obs(1)).shape == (4, 7)


def test_our_ws_client_refuses_an_openpi_server(openpi_server: MiniOpenpiServer) -> None:
    with pytest.raises(ServerError, match=r"is not a vlaeval policy server .*; for an openpi server use openpi://"):
        client(f"ws://127.0.0.1:{openpi_server.port}")


# -- the command line -------------------------------------------------------------------------


def test_the_serve_command_starts_serves_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t0ken")
    process = ServerProcess("zero", tmp_path / "server.log", args=["--max-batch-size", "1"])
    url = process.start(timeout_s=WAIT_S * 2)
    try:
        policy = client(url)
        policy.reset(episode(1))
        assert np.array_equal(policy.act(marker_obs(1)), np.zeros((1, 7), np.float32))
        assert process.health()["requests"] == 1
        policy.close()
    finally:
        assert process.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert "policy zero loaded: chunk size 1" in log and "stopped after 1 requests in 1 batches" in log

    broken = ServerProcess("no_such_module:make", tmp_path / "broken.log")
    with pytest.raises(ServerStartError, match=r"exited with status 1: .*cannot load policy no_such_module:make"):
        broken.start(timeout_s=WAIT_S * 2)


def test_connections_past_the_cap_are_refused_and_repeated_log_lines_are_held_back(tmp_path: Path) -> None:
    process = ServerProcess("zero", tmp_path / "server.log", args=["--max-connections", "4"])
    url = process.start(timeout_s=WAIT_S * 2)
    assert process.proc is not None
    resource.prlimit(process.proc.pid, resource.RLIMIT_NOFILE, (48, 48))  # fewer than the clients below
    clients = [connect(url, compression=None, proxy=None) for _ in range(60)]
    try:
        closes = []
        for ws in clients:
            try:
                ws.recv(WAIT_S)
            except ConnectionClosed as exc:
                closes.append(exc.rcvd)
        assert len(closes) == 56, "all but four were refused"
        assert {(c.code, c.reason) for c in closes if c is not None} == {
            (1013, "the server holds its maximum of 4 connections (--max-connections)")
        }
        assert process.health()["status"] == "ok"
        for ws in clients:
            ws.close()
        policy = client(url)  # the slots came back
        policy.reset(episode(1))
        assert policy.act(marker_obs(1)).shape == (1, 7)
        policy.close()
    finally:
        for ws in clients:
            ws.close()
        assert process.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert log.count("WARNING refused a connection from") == 1, log
    assert "55 more lines like 'refused a connection from %s: %d connections are open'" in log
    assert len(log.splitlines()) < 20, log


def under_ulimit(tmp_path: Path, open_files: int) -> Path:
    """An interpreter that runs this one under ``ulimit -n open_files``."""
    wrapper = tmp_path / "python-under-ulimit"
    wrapper.write_text(f'#!/bin/sh\nulimit -n {open_files}\nexec {shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("max_connections", [64, 128])
def test_a_burst_of_silent_sockets_never_runs_the_server_out_of_descriptors(
    tmp_path: Path, max_connections: int
) -> None:
    """Under ``ulimit -n 256``, 400 sockets that connect and never speak: the server's descriptors
    stay within its bound (asyncio never fails to accept, which would stop accepting for a second),
    and while the burst still holds its sockets, ``/healthz`` answers and an episode is served."""
    open_files, burst = 256, 400
    process = ServerProcess(
        "zero",
        tmp_path / "server.log",
        ["--max-connections", str(max_connections)],
        python=under_ulimit(tmp_path, open_files),
    )
    url = process.start(timeout_s=WAIT_S * 2)
    assert process.proc is not None
    descriptors = Path(f"/proc/{process.proc.pid}/fd")
    own = len(os.listdir(descriptors))
    bound = min(SOCKETS_PER_CONNECTION * max_connections, open_files - descriptors_needed(0))
    address = ("127.0.0.1", int(url.rpartition(":")[2]))
    silent: list[socket.socket] = []
    try:
        peak = own
        for _ in range(burst):
            silent.append(socket.create_connection(address, timeout=WAIT_S))
            peak = max(peak, len(os.listdir(descriptors)))
        deadline = time.monotonic() + server_sockets.SILENT_GRACE_S + 5.0
        while True:
            try:
                health = process.health()
                break
            except OSError:
                assert time.monotonic() < deadline, "/healthz did not answer while the burst held its sockets"
                time.sleep(0.1)
        assert health["open_sockets"] <= bound + 1
        policy = client(url, connect_timeout=5)
        policy.reset(episode(1))
        assert policy.act(marker_obs(1)).shape == (1, 7)
        policy.close()
        peak = max(peak, len(os.listdir(descriptors)))
    finally:
        for sock in silent:
            sock.close()
        assert process.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert "out of system resource" not in log, log
    assert peak <= own + bound + ACCEPT_SLACK, f"{peak} descriptors open: {own} of its own and {bound} sockets"
    assert (f"leaves room for {bound} sockets" in log) == (bound < SOCKETS_PER_CONNECTION * max_connections)


# -- what a client takes from a server --------------------------------------------------------


class OverTheReplyBound:
    """Answers every step with one chunk of zeros whose reply frame is just past 16 MiB."""

    chunk_size = 16 * 2**20 // (7 * 4) + 1

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return np.zeros((self.chunk_size, 7), np.float32)


def test_a_reply_past_16_mib_is_an_episode_error_naming_the_bound(start_server, fake: pytest.Pytester) -> None:
    """A server is trusted for actions, not for its sizes: a session whose server replies with a
    frame over the client's bound records a server error that names the bound, never reads it."""
    from helpers import episode_records, run_dir

    server = start_server("test_serving:OverTheReplyBound")
    result = fake.runpytest(
        "--benchmark=fake.yaml:short",
        f"--policy={server.url}?timeout={WAIT_S}",
        "--episodes=1",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(errors=2)
    records = episode_records(run_dir(fake))
    assert {(r["outcome"], r["error_kind"]) for r in records.values()} == {("error", "server")}
    assert all(f"limit of {16 * 2**20} bytes" in r["message"] for r in records.values()), records


def test_the_serve_command_binds_this_machine_only_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--host`` and without a token, ``vlaeval serve`` listens on the loopback address
    alone, where any client of this machine may use the policy."""
    import subprocess

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    command = [sys.executable, "-m", "pytest_vlaeval", "serve", "--policy", "zero", "--port", "0"]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert re.fullmatch(r"ws://127\.0\.0\.1:\d+", url), url
        policy = client(url, connect_timeout=WAIT_S)
        policy.reset(episode(1))
        assert policy.act(marker_obs(1)).shape == (1, 7)
        policy.close()
    finally:
        process.terminate()
        assert process.wait(WAIT_S) == 0


def test_an_openpi_client_connecting_while_the_policy_loads_is_greeted_once_it_is_loaded(start_server) -> None:
    """openpi's own client connects once and waits for the metadata (it retries no refused
    handshake): over openpi the server takes the connection while the policy loads."""
    server = start_server("test_serving:slow_loading_policy", load=False, protocol="openpi")
    with ThreadPoolExecutor(1) as pool:
        connecting = pool.submit(WebsocketClientPolicy, "127.0.0.1", server.server.port)
        time.sleep(0.5)
        assert not connecting.done(), "greeted before the policy is loaded"
        assert http_get(server.url) == (503, "loading the policy\n")
        loading = asyncio.run_coroutine_threadsafe(server.server.load(), server.loop)
        Recorder.release.set()
        loading.result(WAIT_S)
        policy = connecting.result(WAIT_S)
    assert policy.get_server_metadata()["protocol"] == "openpi"
    assert policy.infer({"proprio": np.zeros((1, 7), np.float32), "prompt": "ok"})["actions"].shape == (1, 7)


def test_a_server_stopped_before_its_policy_loads_closes_the_openpi_connections_waiting_for_it(
    start_server,
) -> None:
    server = start_server("test_serving:slow_loading_policy", load=False, protocol="openpi")
    with ThreadPoolExecutor(1) as pool:
        connecting = pool.submit(WebsocketClientPolicy, "127.0.0.1", server.server.port)
        server.wait_for(lambda stats: stats["open_connections"] == 1)
        began = time.monotonic()
        server.call(server.server.stop())
        assert time.monotonic() - began < 5, "the waiting connection held the server's stop"
        with pytest.raises(ConnectionClosed):
            connecting.result(WAIT_S)
