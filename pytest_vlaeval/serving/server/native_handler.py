"""``--protocol vlaeval``: this package's own protocol (``wire/native.py``), episodes opened and
closed by the client, any number per connection, each act request answered by its chunk; a
client on this machine may attach a shared-memory segment for its arrays (``wire/shared_frames.py``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.connection import Connection, OpenEpisode, Refused
from pytest_vlaeval.serving.wire import native as protocol

if TYPE_CHECKING:
    import asyncio

    from pytest_vlaeval.policy.batched import Outcome
    from pytest_vlaeval.serving.server.core import ServerCore

log = logging.getLogger("pytest_vlaeval.serving")

LOAD_UNIT = "episode"
"""Requests that can wait at once: one per open episode."""
ACCEPTS_WHILE_LOADING = False
"""Our clients retry a handshake refused with HTTP 503 while the policy loads."""


async def handle_connection(server: ServerCore, connection: Connection) -> None:
    """Greet with the server's metadata, then answer the connection's frames until it closes."""
    await connection.ws.send(protocol.pack({**server.metadata, "protocol": protocol.PROTOCOL}))
    async for frame in connection.ws:
        await _frame(server, connection, frame)


async def _frame(server: ServerCore, connection: Connection, frame: bytes | str) -> None:
    episode_id = None
    try:
        arrays = connection.frame_arrays(server.config.max_message_bytes)
        kind, message = protocol.parse(frame, protocol.REQUEST_FIELDS, arrays)
        connection.count_frame(arrays)
        if kind == "attach":
            connection.attach_segment(message["segment"], message["nonce"], server.metadata["shared_memory"])
            await connection.send(protocol.pack({"type": "attached", "segment": message["segment"]}))
            return
        episode_id = message["episode"]
        if kind == "open":
            connection.spawn(_open(server, connection, message))
        elif kind == "act":
            problem = protocol.observation_problem(message["obs"], server.config.max_message_bytes)
            if problem is not None:
                raise protocol.ProtocolError(f"'act' needs 'obs' as {problem}")
            entry = server.table.find(connection, episode_id)
            future = server.table.submit(entry, message["step"], message["obs"])
            connection.spawn(_reply_actions(connection, entry, message["step"], future))
        else:
            entry = connection.episodes.get(episode_id)
            if entry is not None:
                server.table.close(entry, None)
            await connection.send(protocol.pack({"type": "closed", "episode": episode_id}))
    except protocol.ProtocolError as exc:
        log.warning("bad frame from %s: %s", connection.ws.remote_address, exc)
        await connection.send(protocol.error(protocol.BAD_REQUEST, str(exc)))
    except Refused as exc:
        await connection.send(protocol.error(exc.code, str(exc), episode_id))
    except Exception as exc:  # every request gets a reply, even one that meets a server bug
        await connection.send(server_error(exc, episode_id))


async def _open(server: ServerCore, connection: Connection, message: dict[str, Any]) -> None:
    episode_id = message["episode"]
    try:
        info = EpisodeInfo(**{name: message[name] for name in protocol.REQUEST_FIELDS["open"] if name != "episode"})
        await server.open_episode(connection, episode_id, info)
    except Refused as exc:
        await connection.send(protocol.error(exc.code, str(exc), episode_id))
    except PolicyError as exc:
        await connection.send(_policy_error(exc, episode_id))
    except Exception as exc:
        await connection.send(server_error(exc, episode_id))
    else:
        await connection.send(protocol.pack({"type": "opened", "episode": episode_id}))


async def _reply_actions(
    connection: Connection, entry: OpenEpisode, step: int, future: asyncio.Future[Outcome]
) -> None:
    outcome = await future
    episode_id = entry.id
    if isinstance(outcome, PolicyError):
        await connection.send(_policy_error(outcome, episode_id))
    else:
        await connection.send(
            protocol.pack({"type": "actions", "episode": episode_id, "step": step, "actions": outcome})
        )


def server_error(exc: Exception, episode_id: str | None) -> bytes:
    log.error("failed to serve a request for episode %s", episode_id, exc_info=exc)
    return protocol.error(protocol.SERVER, f"the server failed: {type(exc).__name__}: {exc}", episode_id)


def _policy_error(exc: PolicyError, episode_id: str) -> bytes:
    return protocol.error(protocol.POLICY, str(exc), episode_id, protocol.remote_traceback(exc))
