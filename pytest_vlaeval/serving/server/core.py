"""What a wire protocol's handler may use of the server: ``ServerCore``.

Handlers are written against this interface, not against ``PolicyServer``, so the server
depends on its handlers (through ``transports``) and no handler depends back on the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pytest_vlaeval.policy.batched import Outcome, PolicyEngine
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.connection import Connection, OpenEpisode, ServerConfig
from pytest_vlaeval.serving.server.table import EpisodeTable

T = TypeVar("T")


class ServerCore(Protocol):
    config: ServerConfig
    """The server's settings (its frame limit bounds what a frame may decode to)."""
    metadata: dict[str, Any]
    """What a client learns on connecting (the handler adds its protocol's name)."""
    table: EpisodeTable
    """Open episodes: find, submit a request, close."""
    engine: PolicyEngine | None
    """The loaded policy (never None once a connection is served)."""

    async def open_episode(self, connection: Connection, episode_id: str, info: EpisodeInfo) -> OpenEpisode:
        """Admit an episode and reset its state in the policy."""
        ...

    async def serve_one_step(self, connection: Connection, info: EpisodeInfo, obs: dict[str, Any]) -> Outcome:
        """``obs`` as an episode of one step: admitted, opened, acted on and closed."""
        ...

    async def off_loop(self, work: Callable[..., T], *args: Any) -> T:
        """Run ``work(*args)`` (decoding a frame's images) on the server's decoding threads, so the
        event loop serves other connections meanwhile."""
        ...
