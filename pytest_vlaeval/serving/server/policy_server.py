"""The policy server: its lifecycle, HTTP health and the token gate, connections handed to their
protocol's handler (``*_handler.py``), the episode table (``table.py``) on the idle reaper's clock.

One event loop does all network work; every policy call runs on one dedicated thread (through
``policy/batched.py``'s engine), fed by the batcher (``batcher.py``), so the loop keeps reading
frames and sending replies while the policy computes. Faults stay local: a bad frame gets an
error reply on its own connection, and a policy exception fails only the episodes of its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http
import json
import logging
import platform
import sys
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.batched import BatchEpisode, Outcome, PolicyEngine
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.batcher import Batcher
from pytest_vlaeval.serving.server.connection import Connection, OpenEpisode, ServerConfig, SharedMemoryCounts
from pytest_vlaeval.serving.server.sockets import LISTEN_BACKLOG, SocketGate, counted_connections, listen, socket_bound
from pytest_vlaeval.serving.server.table import EpisodeTable
from pytest_vlaeval.serving.transports import BY_PROTOCOL, PROTOCOLS
from pytest_vlaeval.serving.wire import native as protocol
from pytest_vlaeval.serving.wire import shared_frames

if TYPE_CHECKING:
    from pytest_vlaeval.policy.sources import PolicySource

log = logging.getLogger("pytest_vlaeval.serving")

T = TypeVar("T")

DECODING_THREADS = 2
"""Threads that decode frames off the event loop; each holds at most one frame's images."""


class PolicyServer:
    def __init__(self, spec: PolicySource, config: ServerConfig, factory: Callable[[], Any] | None = None) -> None:
        """``factory`` (optional) makes the policy instead of the one ``spec`` names; ``spec`` then names it in logs."""
        if config.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {config.protocol!r}")
        self.spec = spec
        self.factory = factory
        self.config = config
        self.engine: PolicyEngine | None = None
        self._protocol = BY_PROTOCOL[config.protocol].handler_module()
        self.batcher = Batcher(
            self._forward,
            max_batch=config.max_batch_size,
            max_wait_s=config.max_wait_ms / 1000,
            open_episodes=self._could_request,
        )
        self.table = EpisodeTable(
            config.max_episodes, config.admission_timeout_s, config.idle_timeout_s, self.batcher.submit, self._release
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlaeval-policy")
        self._decoding = ThreadPoolExecutor(max_workers=DECODING_THREADS, thread_name_prefix="vlaeval-decode")
        self.metadata: dict[str, Any] = {}
        """What a client learns on connecting (the protocol's handler adds its name)."""
        self._server: Server | None = None
        self._background: list[asyncio.Task[None]] = []
        self._connections = 0
        """Connections past their handshake, being served."""
        self.shared_memory = SharedMemoryCounts()
        self._sockets = SocketGate(socket_bound(config.max_connections))
        """Every socket from accept until it is closed, handshakes in progress included."""
        self._one_step: set[str] = set()
        """The open one-step episodes (``serve_one_step``), by id: their batch opens and closes them."""
        self._loaded = asyncio.Event()
        """Set once ``load`` has built the policy: connections taken while it loads wait for it."""

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen (health answers 503 until ``load`` finishes) and start batching and reaping."""
        listener = listen(self.config.host, self.config.port, self._sockets)
        self._server = await serve(
            self._handle,
            sock=listener,
            backlog=LISTEN_BACKLOG,
            process_request=self._http,
            max_size=self.config.max_message_bytes,
            compression=None,
            create_connection=counted_connections(self._sockets),
            # An episode's process can be busy for long in native code (an env build on a loaded
            # CPU) and answer a ping late: that is no reason to drop its episode. Dead peers close
            # their socket, abandoned ones are reaped after ``idle_timeout_s``.
            ping_timeout=None,
        )
        self._background = [asyncio.create_task(self.batcher.run()), asyncio.create_task(self._reap_idle())]
        log.info(
            "listening on %s (protocol %s, Python %s at %s)",
            self.url,
            self.config.protocol,
            platform.python_version(),
            sys.executable,
        )

    async def load(self) -> None:
        """Build the policy on the policy thread; raises ``PolicyError`` or ``SpecError``."""
        engine = await self._in_policy_thread(PolicyEngine, self.spec, self.config.action_dim, self.factory)
        self.metadata = {
            "type": "metadata",
            "version": protocol.VERSION,
            "model": engine.model,
            "chunk_size": engine.chunk_size,
            "action_dim": engine.action_dim,
            "batched": engine.batched,
            "max_message_bytes": self.config.max_message_bytes,
            "admission_timeout_s": self.config.admission_timeout_s,
            "idle_timeout_s": self.config.idle_timeout_s,
            "shared_memory": self.config.shared_memory and shared_frames.available(),
        }
        if not engine.batched:
            # Its rows are computed one at a time whatever the batch: waiting for batch mates only delays them.
            self.batcher.max_wait_s = 0.0
        self.engine = engine
        self._loaded.set()
        log.info(
            "policy %s loaded: chunk size %d, %s; max batch %d, max wait %g ms, max episodes %d",
            engine.model["name"],
            engine.chunk_size,
            "batched (act_batch)" if engine.batched else "one instance per open episode",
            self.config.max_batch_size,
            self.batcher.max_wait_s * 1000,
            self.config.max_episodes,
        )

    def join_policy_thread(self) -> None:
        """After ``stop``, from outside the event loop: wait until the policy thread has ended, so
        a caller that served from its own process is left with nothing running."""
        self._executor.shutdown(wait=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)  # the loop must not block on a policy call
        self._decoding.shutdown(wait=False, cancel_futures=True)
        stats = self.stats()
        log.info(
            "stopped after %d requests in %d batches (mean batch size %.2f); %d frames came through shared memory",
            stats["requests"],
            stats["batches"],
            stats["mean_batch_size"],
            stats["shared_memory_frames"],
        )

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"ws://{host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        sizes = self.batcher.sizes
        batches = sum(sizes.values())
        return {
            "status": "ok" if self.engine is not None else "loading",
            "policy": self.engine.model["name"] if self.engine is not None else self.spec.text,
            "protocol": self.config.protocol,
            "open_connections": self._connections,
            "open_sockets": self._sockets.open,
            "open_episodes": len(self.table.episodes),
            "waiting_opens": self.table.slots.waiting,
            "queued_requests": self.batcher.waiting,
            "requests": self.table.requests,
            "batches": batches,
            "mean_batch_size": sum(n * c for n, c in sizes.items()) / batches if batches else 0.0,
            "batch_sizes": {str(n): sizes[n] for n in sorted(sizes)},
            "policy_busy_s": round(self.batcher.busy_s, 3),
            "reaped_episodes": self.table.reaped,
            "shared_memory_frames": self.shared_memory.frames,
            "shared_memory_segments": self.shared_memory.segments,
        }

    # -- HTTP: health and the handshake gate ---------------------------------------------------

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """The token first, for every path: ``/healthz`` says which policy is served and how busy
        it is, which is nobody's business without the token either."""
        if self.config.token:
            headers = request.headers.get_all("Authorization")
            if len(headers) > 1:
                log.warning(
                    "refused a connection from %s: %d Authorization headers", connection.remote_address, len(headers)
                )
                return connection.respond(http.HTTPStatus.BAD_REQUEST, "more than one Authorization header\n")
            if not self._authorized(headers[0] if headers else "", request.path):
                log.warning("refused a connection from %s: missing or wrong token", connection.remote_address)
                return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong token\n")
        if urlsplit(request.path).path == "/healthz":
            if self.engine is None:
                return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "loading the policy\n")
            response = connection.respond(http.HTTPStatus.OK, json.dumps(self.stats()) + "\n")
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        if self.engine is None and not self._protocol.ACCEPTS_WHILE_LOADING:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "the policy is still loading\n")
        return None

    def _authorized(self, header: str, path: str) -> bool:
        """The token from the header, or from ``?token=`` for clients that cannot set headers (vla-eval's)."""
        scheme, _, value = header.partition(" ")
        token = (self.config.token or "").encode()
        if scheme.lower() in ("bearer", "api-key") and hmac.compare_digest(value.strip().encode(), token):
            return True
        query = dict(parse_qsl(urlsplit(path).query))
        return "token" in query and hmac.compare_digest(query["token"].encode(), token)

    # -- connections and episodes --------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        if self._connections >= self.config.max_connections:
            log.warning("refused a connection from %s: %d connections are open", ws.remote_address, self._connections)
            await ws.close(
                CloseCode.TRY_AGAIN_LATER,
                f"the server holds its maximum of {self.config.max_connections} connections (--max-connections)",
            )
            return
        connection = Connection(ws, shared=self.shared_memory)
        self._connections += 1
        try:
            if await self._loaded_before_closing(ws):
                await self._protocol.handle_connection(self, connection)
        except ConnectionClosed as exc:
            if exc.rcvd is None or exc.rcvd.code != 1000:
                log.warning("connection from %s closed: %s", ws.remote_address, exc)
        finally:
            self._connections -= 1
            for task in list(connection.tasks):
                task.cancel()
            for entry in list(connection.episodes.values()):
                self.table.close(entry, "its connection closed")
            connection.detach_segment()

    async def _loaded_before_closing(self, ws: ServerConnection) -> bool:
        """Whether the policy is loaded, waiting for it while the connection stays open (one taken
        while it loads, ``ACCEPTS_WHILE_LOADING``): a server that stops before it loads closes it."""
        if not self._loaded.is_set():
            waits = {asyncio.ensure_future(self._loaded.wait()), asyncio.ensure_future(ws.wait_closed())}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
        return self._loaded.is_set()

    async def open_episode(self, connection: Connection, episode_id: str, info: EpisodeInfo) -> OpenEpisode:
        """Admit an episode and reset its state in the policy (on the policy thread)."""
        assert self.engine is not None  # no connection is served before the policy is loaded
        engine = self.engine
        return await self.table.admit(connection, episode_id, info, lambda e: self._in_policy_thread(engine.open, e))

    async def serve_one_step(self, connection: Connection, info: EpisodeInfo, obs: dict[str, Any]) -> Outcome:
        """``obs`` served as an episode of one step (openpi's protocol has no episode boundary): admitted,
        then opened, acted on and closed on the policy thread by the one call of the batch that takes
        it, rather than in three hand-offs to that thread. ``Refused`` without a slot in time."""
        entry = await self.table.admit(connection, uuid.uuid4().hex, info, _opened_by_its_batch)
        self._one_step.add(entry.episode.id)
        try:
            return await self.table.submit(entry, 0, obs)
        finally:
            self.table.close(entry, None)

    def _release(self, episode: BatchEpisode) -> None:
        """A closed episode's queued requests go, and its state (on the policy thread); a one-step
        episode's batch closed it already, or it never reached the policy."""
        self.batcher.withdraw(episode)
        if episode.id in self._one_step:
            self._one_step.discard(episode.id)
            return
        if self.engine is not None:
            with contextlib.suppress(RuntimeError):  # shutting down: the state goes with the process
                self._executor.submit(self.engine.close, episode)

    async def _reap_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(self.config.idle_timeout_s / 4, 0.05), 30.0))
            self.table.reap(loop.time())

    def _could_request(self) -> int:
        """How many requests could be waiting at most (the batcher waits no longer once all are in)."""
        return self._connections if self._protocol.LOAD_UNIT == "connection" else len(self.table.episodes)

    # -- the policy thread ---------------------------------------------------------------------

    async def _forward(self, episodes: Sequence[BatchEpisode], observations: Sequence[dict[str, Any]]) -> list[Outcome]:
        assert self.engine is not None
        one_step = [episode for episode in episodes if episode.id in self._one_step]
        if not one_step:
            return await self._in_policy_thread(self.engine.act, episodes, observations)
        return await self._in_policy_thread(_act_opening, self.engine, one_step, episodes, observations)

    async def _in_policy_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def off_loop(self, work: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._decoding, work, *args)


async def _opened_by_its_batch(episode: BatchEpisode) -> None:
    """A one-step episode's reset at admission: none, its batch opens it (``_act_opening``)."""


def _act_opening(
    engine: PolicyEngine,
    one_step: Sequence[BatchEpisode],
    episodes: Sequence[BatchEpisode],
    observations: Sequence[dict[str, Any]],
) -> list[Outcome]:
    """``engine.act`` on a batch holding one-step episodes, which open first and close after (also
    when the call fails); one that fails to open gets its error as its outcome and the rest are served.
    Every episode whose open began is closed, as a half-opened one holds state too (a policy
    instance taken from the idle ones, an ``open_episode``'s partial state)."""
    outcomes: dict[int, Outcome] = {}
    opened: list[BatchEpisode] = []
    try:
        for row, episode in enumerate(episodes):
            if episode in one_step:
                opened.append(episode)
                try:
                    engine.open(episode)
                except PolicyError as exc:
                    outcomes[row] = exc
        rows = [row for row in range(len(episodes)) if row not in outcomes]
        if rows:
            outcomes.update(
                zip(rows, engine.act([episodes[r] for r in rows], [observations[r] for r in rows]), strict=True)
            )
        return [outcomes[row] for row in range(len(episodes))]
    finally:
        for episode in opened:
            engine.close(episode)
