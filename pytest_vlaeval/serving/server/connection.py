"""What the server core and every wire protocol's handler share: the server's settings, a
connection with its open episodes and its shared-memory segment, and the refusal a handler turns
into an error reply.

``ServerConfig`` is the one owner of the server's defaults (``vlaeval serve`` shows them).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from pytest_vlaeval.policy.batched import BatchEpisode, Outcome
from pytest_vlaeval.serving.wire.native import ProtocolError
from pytest_vlaeval.serving.wire.shared_frames import FrameArrays, SharedSegment


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    action_dim: int = 7
    max_batch_size: int = 16
    max_wait_ms: float = 5.0
    max_episodes: int = 64
    max_connections: int = 256
    admission_timeout_s: float = 300.0
    idle_timeout_s: float = 900.0
    max_message_bytes: int = 8 * 2**20
    token: str | None = None
    protocol: str = "vlaeval"
    shared_memory: bool = True
    """Whether clients on this machine may send their arrays through shared memory (``shared_frames.py``)."""


class Refused(Exception):
    """A request the server answers with an error reply of ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_SERIALS = itertools.count(1)


@dataclass
class SharedMemoryCounts:
    """The shared-memory fast path, as ``/healthz`` reports it."""

    frames: int = 0
    """Frames whose arrays came through shared memory."""
    segments: int = 0
    """Segments held now, one per connection that attached one."""


@dataclass(eq=False)
class Connection:
    ws: ServerConnection
    episodes: dict[str, OpenEpisode] = field(default_factory=dict)
    """Its open episodes by the ids its client gave them: ids are the connection's own."""
    opening: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    serial: int = field(default_factory=lambda: next(_SERIALS))
    """Unique in the process: with it, a client's episode id becomes a server-wide one."""
    shared: SharedMemoryCounts = field(default_factory=SharedMemoryCounts)
    """The server's counts, which this connection's segment and frames add to."""
    segment: SharedSegment | None = None
    """The client's shared-memory segment, once attached: its frames' array headers are read from it."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def send(self, frame: bytes | str) -> None:
        with contextlib.suppress(ConnectionClosed):  # the client left; its handler closes its episodes
            await self.ws.send(frame)

    def attach_segment(self, name: Any, nonce: Any, enabled: bool) -> None:
        """Hold the client's segment; ``ProtocolError`` when it cannot be (its arrays then come inline)."""
        if not enabled:
            raise ProtocolError("this server takes no shared memory (vlaeval serve --no-shared-memory)")
        if self.segment is not None:
            raise ProtocolError(f"this connection already attached shared-memory segment {self.segment.name}")
        self.segment = SharedSegment.attach(name, nonce)
        self.shared.segments += 1

    def frame_arrays(self, limit: int) -> FrameArrays | None:
        """The reader of one frame's shared-memory arrays (at most ``limit`` bytes), or None without a segment."""
        return FrameArrays(self.segment, limit) if self.segment is not None else None

    def count_frame(self, arrays: FrameArrays | None) -> None:
        """Count a decoded frame that took its arrays from shared memory."""
        if arrays is not None and arrays.count:
            self.shared.frames += 1

    def detach_segment(self) -> None:
        """At the connection's end: let go of the segment (the system frees it once its client has too)."""
        segment, self.segment = self.segment, None
        if segment is not None:
            segment.close()
            self.shared.segments -= 1


@dataclass(eq=False)
class OpenEpisode:
    id: str
    """The id its client gave it, valid on its connection only."""
    episode: BatchEpisode
    """What the policy sees: its ``id`` is unique in the server (``served_id``)."""
    connection: Connection
    last_active: float
    request: asyncio.Future[Outcome] | None = None


def served_id(connection: Connection, episode_id: str) -> str:
    """The server-wide id of a connection's episode: two clients may pick the same id, and
    neither can learn of the other's episodes through it."""
    return f"{episode_id}@{connection.serial}"
