"""``vlaeval serve --protocol vla-eval``: the server side of vla-eval's model-server protocol.

One connection is one vla-eval harness shard, holding at most one episode at a time:
``episode_start`` opens an episode (its state reset, as for an ``open``), ``episode_end`` or the
next ``episode_start`` closes it. Observations go through the same batcher as any other request,
so concurrent harness connections are batched together while each keeps its own state. The
server splits chunks itself: one action per observation, the policy being called again only
when its chunk is used up, exactly as the evaluation's own episode loop does. Failures are
answered with ``error`` frames (``bad_request: ...``, ``episode_start_failed: ...``,
``observation_failed: ...``, ``server_error: ...``), and the connection goes on. PNG and JPEG
images are decoded off the event loop (they are work), within the wire module's image budget;
everything else of a frame on it (a hop to a thread and back costs more than reading raw arrays).
Our own client on this machine may send a second ``hello`` with ``shared_memory`` (a segment's
name and nonce, ``wire/shared_frames.py``), answered by a ``hello`` with ``attached``.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.connection import Connection, OpenEpisode, Refused
from pytest_vlaeval.serving.wire import native as protocol
from pytest_vlaeval.serving.wire import vla_eval as wire
from pytest_vlaeval.serving.wire.native import ProtocolError
from pytest_vlaeval.version import __version__

if TYPE_CHECKING:
    from pytest_vlaeval.serving.server.core import ServerCore

log = logging.getLogger("pytest_vlaeval.serving")

LOAD_UNIT = "episode"
"""Requests that can wait at once: one per open episode (a connection holds at most one)."""
ACCEPTS_WHILE_LOADING = False
"""vla-eval's clients retry a handshake refused with HTTP 503 while the policy loads."""
NO_STEP_LIMIT = 2**31 - 1
"""``max_steps`` of an episode whose harness sends no step limit (vla-eval's harness keeps its own)."""
_TASK_FIELDS = {name: kind for name, kind in protocol.REQUEST_FIELDS["open"].items() if name != "episode"}
"""An ``episode_start`` task, checked as the fields of this package's own ``open``."""


async def handle_connection(server: ServerCore, connection: Connection) -> None:
    """Answer one harness connection's frames until it closes (the server closes its episode)."""
    session = _HarnessSession(server, connection)  # the harness speaks first: no greeting
    async for frame in connection.ws:
        await session.handle(frame)


class _HarnessSession:
    def __init__(self, server: ServerCore, connection: Connection) -> None:
        self.server = server
        self.connection = connection
        self.entry: OpenEpisode | None = None
        self.pending: deque[np.ndarray] = deque()

    async def handle(self, frame: bytes | str) -> None:
        seq = 0
        try:
            limit = self.server.config.max_message_bytes
            arrays = self.connection.frame_arrays(limit)
            kind, payload, seq = wire.read_frame(frame, arrays)
            self.connection.count_frame(arrays)
            if wire.holds_compressed_images(payload):
                await self.server.off_loop(wire.decode_images, payload, seq, limit)
            if kind == "hello":
                await self._hello(payload, seq)
            elif kind == "episode_start":
                await self._start(payload, seq)
            elif kind == "observation":
                await self._observe(payload, seq)
            elif kind == "episode_end":
                self._end()
            elif kind == "error":
                log.warning("the harness at %s reported: %s", self.connection.ws.remote_address, payload.get("error"))
            else:
                raise ProtocolError(f"a server does not accept {kind!r} frames")
        except ProtocolError as exc:
            log.warning("bad frame from %s: %s", self.connection.ws.remote_address, exc)
            seq = exc.seq if isinstance(exc, wire.FrameError) else seq
            await self.connection.send(wire.error_frame(f"bad_request: {exc}", seq))
        except Exception as exc:  # every frame gets a reply, even one that meets a server bug
            log.error("failed to serve a frame from %s", self.connection.ws.remote_address, exc_info=exc)
            await self.connection.send(wire.error_frame(f"server_error: {type(exc).__name__}: {exc}", seq))

    async def _hello(self, payload: dict[str, Any], seq: int) -> None:
        version = wire.other_version(payload)
        if version is not None:
            raise ProtocolError(f"this server speaks protocol version {wire.VERSION}, the harness {version}")
        engine = self.server.engine
        assert engine is not None  # connections are refused until the policy is loaded
        shared_memory = self.server.metadata["shared_memory"]
        capabilities = {"episode_state": True, "batched": engine.batched, "chunk_size": engine.chunk_size}
        attached = {}
        if "shared_memory" in payload:  # our own client's second hello
            request = payload["shared_memory"] if isinstance(payload["shared_memory"], dict) else {}
            self.connection.attach_segment(request.get("segment"), request.get("nonce"), shared_memory)
            attached = {"attached": request["segment"]}
        reply = wire.hello_payload(
            f"pytest-vlaeval {__version__}",
            model_server=engine.model["name"],
            capabilities={**capabilities, "action_dim": engine.action_dim, "shared_memory": shared_memory},
            **attached,
        )
        await self.connection.send(wire.pack_frame("hello", reply, seq))

    async def _start(self, payload: dict[str, Any], seq: int) -> None:
        self._end()
        try:
            info = _episode_info(payload.get("task"))
            self.entry = await self.server.open_episode(self.connection, uuid.uuid4().hex, info)
        except (Refused, PolicyError, ProtocolError) as exc:
            await self.connection.send(wire.error_frame(f"episode_start_failed: {exc}", seq))

    async def _observe(self, payload: dict[str, Any], seq: int) -> None:
        entry = self.entry
        if entry is None or self.connection.episodes.get(entry.id) is not entry:
            why = (
                "no episode_start on this connection"
                if entry is None
                else self.server.table.why_unknown(self.connection, entry.id)
            )
            await self.connection.send(wire.error_frame(f"observation_failed: {why}", seq))
            return
        step = entry.episode.step + 1
        if not self.pending:
            view = wire.from_wire_observation(payload)
            outcome = await self.server.table.submit(entry, step, view)
            if isinstance(outcome, PolicyError):
                await self.connection.send(wire.error_frame(f"observation_failed: {outcome}", seq))
                return
            self.pending.extend(outcome)
        entry.episode.step = step
        await self.connection.send(wire.pack_frame("action", {"actions": self.pending.popleft()}, seq))

    def _end(self) -> None:
        entry, self.entry = self.entry, None
        self.pending.clear()
        if entry is not None:
            self.server.table.close(entry, None)


def _episode_info(task: Any) -> EpisodeInfo:
    """The episode a harness's task describes (vla-eval tasks carry a name, ours the full info),
    its fields checked as an ``open``'s: types and ranges, a negative seed or a step limit of 0 refused."""
    if not isinstance(task, dict):
        raise ProtocolError(f"'episode_start' needs a 'task' map, got {type(task).__name__}")
    fields = {
        "task": _given(task, "env_id", "name", default="task"),
        "seed": _given(task, "seed", default=0),
        "instruction": _given(task, "instruction", "task_description", default=""),
        "episode_index": _given(task, "episode_index", "episode_idx", default=0),
        "max_steps": _given(task, "max_steps", default=NO_STEP_LIMIT),
    }
    protocol.check_fields("episode_start", fields, _TASK_FIELDS)
    return EpisodeInfo(**fields)


def _given(task: dict[Any, Any], *keys: str, default: Any) -> Any:
    """The value of the first of ``keys`` the task gives (not null, not empty): vla-eval's names, then ours."""
    for key in keys:
        value = task.get(key)
        if value is not None and not (isinstance(value, str) and not value):
            return value
    return default
