"""The policy server: connections, episodes, admission, idle reaping, token auth and health.

One event loop does all network work; every policy call runs on one dedicated thread (see
``engine.py``), fed by the batcher (``batcher.py``), so the loop keeps reading frames and
sending replies while the policy computes. Faults stay local: a bad frame gets an error reply
on its own connection, and a policy exception fails only the episodes of its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http
import json
import logging
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.contract import EpisodeInfo, episode_rng
from pytest_vlaeval.serving import protocol
from pytest_vlaeval.serving.admission import EpisodeSlots
from pytest_vlaeval.serving.batcher import Batcher
from pytest_vlaeval.serving.connection import PROTOCOLS, Connection, OpenEpisode, Refused, ServerConfig
from pytest_vlaeval.serving.engine import Outcome, PolicyEngine, ServedEpisode

log = logging.getLogger("pytest_vlaeval.serving")

T = TypeVar("T")

REAPED_MEMORY = 1024
"""How many reaped episode ids are remembered, to tell a late client why its episode is gone."""


class PolicyServer:
    def __init__(self, spec: str, config: ServerConfig, factory: Callable[[], Any] | None = None) -> None:
        """``factory`` (optional) makes the policy instead of the one ``spec`` names; ``spec`` then names it in logs."""
        if config.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {config.protocol!r}")
        self.spec = spec
        self.factory = factory
        self.config = config
        self.engine: PolicyEngine | None = None
        self.requests = 0
        self.reaped = 0
        self.batcher = Batcher(
            self._forward,
            max_batch=config.max_batch_size,
            max_wait_s=config.max_wait_ms / 1000,
            open_episodes=self._could_request,
        )
        self._slots = EpisodeSlots(config.max_episodes)
        self._episodes: dict[str, OpenEpisode] = {}
        self._reaped: OrderedDict[str, None] = OrderedDict()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlaeval-policy")
        self._metadata: dict[str, Any] = {}
        self._server: Server | None = None
        self._background: list[asyncio.Task[None]] = []
        self._connections = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen (health answers 503 until ``load`` finishes) and start batching and reaping."""
        self._server = await serve(
            self._handle,
            self.config.host,
            self.config.port,
            process_request=self._http,
            max_size=self.config.max_message_bytes,
            compression=None,
        )
        self._background = [asyncio.create_task(self.batcher.run()), asyncio.create_task(self._reap_idle())]
        log.info("listening on %s (protocol %s)", self.url, self.config.protocol)

    async def load(self) -> None:
        """Build the policy on the policy thread; raises ``PolicyError`` or ``SpecError``."""
        engine = await self._in_policy_thread(PolicyEngine, self.spec, self.config.action_dim, self.factory)
        self._metadata = {
            "type": "metadata",
            "protocol": protocol.PROTOCOL if self.config.protocol == "vlaeval" else "openpi",
            "version": protocol.VERSION,
            "model": engine.model,
            "chunk_size": engine.chunk_size,
            "action_dim": engine.action_dim,
            "batched": engine.batched,
            "max_message_bytes": self.config.max_message_bytes,
            "admission_timeout_s": self.config.admission_timeout_s,
            "idle_timeout_s": self.config.idle_timeout_s,
        }
        self.engine = engine
        log.info(
            "policy %s loaded: chunk size %d, %s; max batch %d, max wait %g ms, max episodes %d",
            engine.model["name"],
            engine.chunk_size,
            "batched (act_batch)" if engine.batched else "one instance per open episode",
            self.config.max_batch_size,
            self.config.max_wait_ms,
            self.config.max_episodes,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
        stats = self.stats()
        log.info(
            "stopped after %d requests in %d batches (mean batch size %.2f)",
            stats["requests"],
            stats["batches"],
            stats["mean_batch_size"],
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
            "policy": self.engine.model["name"] if self.engine is not None else self.spec,
            "protocol": self.config.protocol,
            "open_episodes": len(self._episodes),
            "waiting_opens": self._slots.waiting,
            "queued_requests": self.batcher.waiting,
            "requests": self.requests,
            "batches": batches,
            "mean_batch_size": sum(n * c for n, c in sizes.items()) / batches if batches else 0.0,
            "batch_sizes": {str(n): sizes[n] for n in sorted(sizes)},
            "policy_busy_s": round(self.batcher.busy_s, 3),
            "reaped_episodes": self.reaped,
        }

    # -- HTTP: health and the handshake gate ---------------------------------------------------

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        if urlsplit(request.path).path == "/healthz":
            if self.engine is None:
                return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "loading the policy\n")
            response = connection.respond(http.HTTPStatus.OK, json.dumps(self.stats()) + "\n")
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        if self.config.token and not self._authorized(request.headers.get("Authorization", ""), request.path):
            log.warning("refused a connection from %s: missing or wrong token", connection.remote_address)
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong token\n")
        if self.engine is None:
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

    # -- connections -------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        connection = Connection(ws)
        serve_frames = self._vlaeval_frame if self.config.protocol == "vlaeval" else self._openpi_frame
        self._connections += 1
        try:
            if self.config.protocol == "vla-eval":  # the harness speaks first; see vla_eval_server.py
                from pytest_vlaeval.serving.vla_eval_server import serve_connection

                await serve_connection(self, connection)
                return
            await ws.send(protocol.pack(self._metadata))
            async for frame in ws:
                await serve_frames(connection, frame)
        except ConnectionClosed as exc:
            if exc.rcvd is None or exc.rcvd.code != 1000:
                log.warning("connection from %s closed: %s", ws.remote_address, exc)
        finally:
            self._connections -= 1
            for task in list(connection.tasks):
                task.cancel()
            for entry in list(connection.episodes.values()):
                self._close(entry, "its connection closed")

    async def _vlaeval_frame(self, connection: Connection, frame: bytes | str) -> None:
        episode_id = None
        try:
            kind, message = protocol.parse(frame, protocol.REQUEST_FIELDS)
            episode_id = message["episode"]
            if kind == "open":
                connection.spawn(self._open(connection, message))
            elif kind == "act":
                self._act(connection, message)
            else:
                entry = connection.episodes.get(episode_id)
                if entry is not None:
                    self._close(entry, None)
                await connection.send(protocol.pack({"type": "closed", "episode": episode_id}))
        except protocol.ProtocolError as exc:
            log.warning("bad frame from %s: %s", connection.ws.remote_address, exc)
            await connection.send(protocol.error(protocol.BAD_REQUEST, str(exc)))
        except Refused as exc:
            await connection.send(protocol.error(exc.code, str(exc), episode_id))
        except Exception as exc:  # every request gets a reply, even one that meets a server bug
            await connection.send(_server_error(exc, episode_id))

    async def _open(self, connection: Connection, message: dict[str, Any]) -> None:
        episode_id = message["episode"]
        try:
            info = EpisodeInfo(**{name: message[name] for name in protocol.REQUEST_FIELDS["open"] if name != "episode"})
            await self._admit(connection, episode_id, info)
        except Refused as exc:
            await connection.send(protocol.error(exc.code, str(exc), episode_id))
        except PolicyError as exc:
            await connection.send(_policy_error(exc, episode_id))
        except Exception as exc:
            await connection.send(_server_error(exc, episode_id))
        else:
            await connection.send(protocol.pack({"type": "opened", "episode": episode_id}))

    def _act(self, connection: Connection, message: dict[str, Any]) -> None:
        entry = connection.episodes.get(message["episode"])
        if entry is None:
            raise Refused(protocol.UNKNOWN_EPISODE, self._why_unknown(message["episode"]))
        future = self._submit(entry, message["step"], message["obs"])
        connection.spawn(self._reply_actions(connection, entry, message["step"], future))

    async def _reply_actions(
        self, connection: Connection, entry: OpenEpisode, step: int, future: asyncio.Future[Outcome]
    ) -> None:
        outcome = await future
        episode_id = entry.episode.id
        if isinstance(outcome, PolicyError):
            await connection.send(_policy_error(outcome, episode_id))
        else:
            await connection.send(
                protocol.pack({"type": "actions", "episode": episode_id, "step": step, "actions": outcome})
            )

    async def _openpi_frame(self, connection: Connection, frame: bytes | str) -> None:
        """openpi has no episode boundary: each observation is served as a fresh one-step episode."""
        try:
            obs = protocol.unpack(frame)
            valid, meaning = protocol.FIELD_VALUES["obs"]
            if not valid(obs):
                raise protocol.ProtocolError(f"an observation must be {meaning}")
            prompt = obs.get("prompt", obs.get("instruction", ""))
            info = EpisodeInfo(task="openpi", seed=0, instruction=str(prompt), episode_index=0, max_steps=1)
            entry = await self._admit(connection, uuid.uuid4().hex, info)
            try:
                outcome: Outcome | Refused = await self._submit(entry, 0, {"instruction": info.instruction, **obs})
            finally:
                self._close(entry, None)
        except protocol.ProtocolError as exc:
            log.warning("bad frame from %s: %s", connection.ws.remote_address, exc)
            await connection.send(f"bad request: {exc}")
            return
        except (Refused, PolicyError) as exc:
            outcome = exc
        except Exception as exc:  # every request gets a reply, even one that meets a server bug
            log.error("failed to serve an openpi request", exc_info=exc)
            outcome = exc
        if isinstance(outcome, Exception):
            await connection.send("\n".join(filter(None, [str(outcome), _remote_traceback(outcome)])))
        else:
            await connection.send(protocol.pack({"actions": outcome}))

    # -- episodes ----------------------------------------------------------------------------

    async def _admit(self, connection: Connection, episode_id: str, info: EpisodeInfo) -> OpenEpisode:
        """Wait for a slot, register the episode and reset its state in the policy."""
        if episode_id in self._episodes:
            raise Refused(protocol.BAD_REQUEST, f"episode {episode_id} is already open")
        if len(connection.episodes) + connection.opening >= self.config.max_episodes:
            raise Refused(protocol.ADMISSION, f"this connection already holds {self.config.max_episodes} episodes")
        connection.opening += 1
        try:
            admitted = await self._slots.acquire(self.config.admission_timeout_s)
        finally:
            connection.opening -= 1
        if not admitted:
            raise Refused(
                protocol.ADMISSION,
                f"no free episode slot within {self.config.admission_timeout_s:g} s: {len(self._episodes)} episodes "
                f"are open (max-episodes {self.config.max_episodes})",
            )
        try:  # the slot is ours: until the episode is registered (then _close frees it), give it back on any exit
            if episode_id in self._episodes:
                raise Refused(protocol.BAD_REQUEST, f"episode {episode_id} is already open")
            loop = asyncio.get_running_loop()
            entry = OpenEpisode(ServedEpisode(episode_id, info, episode_rng(info)), connection, loop.time())
        except BaseException:
            self._slots.release()
            raise
        self._episodes[episode_id] = entry
        connection.episodes[episode_id] = entry
        assert self.engine is not None
        try:
            await self._in_policy_thread(self.engine.open, entry.episode)
        except BaseException:
            self._close(entry, None)
            raise
        return entry

    def _submit(self, entry: OpenEpisode, step: int, obs: dict[str, Any]) -> asyncio.Future[Outcome]:
        if entry.request is not None:
            raise Refused(protocol.BUSY, f"episode {entry.episode.id} already has a request in flight")
        if step < entry.episode.step:
            raise Refused(protocol.BAD_REQUEST, f"step {step} goes back from step {entry.episode.step}")
        entry.episode.step = step
        entry.request = future = self.batcher.submit(entry.episode, obs)
        self.requests += 1

        def settled(_: asyncio.Future[Outcome]) -> None:
            entry.request = None
            entry.last_active = asyncio.get_running_loop().time()

        future.add_done_callback(settled)
        return future

    def _close(self, entry: OpenEpisode, reason: str | None) -> None:
        """Forget an episode, free its slot and (on the policy thread) its state. Idempotent."""
        episode = entry.episode
        if self._episodes.get(episode.id) is not entry:
            return
        del self._episodes[episode.id]
        entry.connection.episodes.pop(episode.id, None)
        self.batcher.withdraw(episode)
        self._slots.release()
        if self.engine is not None:
            with contextlib.suppress(RuntimeError):  # shutting down: the state goes with the process
                self._executor.submit(self.engine.close, episode)
        if reason:
            log.info("closed episode %s (%s seed %d): %s", episode.id, episode.info.task, episode.info.seed, reason)

    async def _reap_idle(self) -> None:
        limit = self.config.idle_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(limit / 4, 0.05), 30.0))
            now = loop.time()
            for entry in [e for e in self._episodes.values() if e.request is None and now - e.last_active > limit]:
                self.reaped += 1
                self._reaped[entry.episode.id] = None
                while len(self._reaped) > REAPED_MEMORY:
                    self._reaped.popitem(last=False)
                log.warning(
                    "closed episode %s (%s seed %d) after %.0f s without a request (idle limit %g s); its state is freed",
                    entry.episode.id,
                    entry.episode.info.task,
                    entry.episode.info.seed,
                    now - entry.last_active,
                    limit,
                )
                self._close(entry, None)

    def _why_unknown(self, episode_id: str) -> str:
        if episode_id in self._reaped:
            return f"episode {episode_id} was closed by the server after {self.config.idle_timeout_s:g} s without a request"
        return f"episode {episode_id} is not open on this connection"

    def _could_request(self) -> int:
        """How many requests could be waiting at most: one per open episode, or per openpi connection."""
        return self._connections if self.config.protocol == "openpi" else len(self._episodes)

    # -- the policy thread ---------------------------------------------------------------------

    async def _forward(
        self, episodes: Sequence[ServedEpisode], observations: Sequence[dict[str, Any]]
    ) -> list[Outcome]:
        assert self.engine is not None
        return await self._in_policy_thread(self.engine.act, episodes, observations)

    async def _in_policy_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


def _remote_traceback(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return "".join(traceback.format_exception(cause)) if cause is not None else None


def _server_error(exc: Exception, episode_id: str | None) -> bytes:
    log.error("failed to serve a request for episode %s", episode_id, exc_info=exc)
    return protocol.error(protocol.SERVER, f"the server failed: {type(exc).__name__}: {exc}", episode_id)


def _policy_error(exc: PolicyError, episode_id: str) -> bytes:
    return protocol.error(protocol.POLICY, str(exc), episode_id, _remote_traceback(exc))
