"""``--protocol openpi``: openpi's websocket policy protocol, which has no episode boundary, so
each observation is served as a fresh one-step episode; errors are text frames. Our own client on
this machine may attach a shared-memory segment first (``wire/shared_frames.py``): a frame that is
the map ``{"vlaeval_attach": {"segment", "nonce"}}``, answered ``{"attached": segment}``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.connection import Connection, Refused
from pytest_vlaeval.serving.wire import native as protocol

if TYPE_CHECKING:
    from pytest_vlaeval.policy.batched import Outcome
    from pytest_vlaeval.serving.server.core import ServerCore

log = logging.getLogger("pytest_vlaeval.serving")

LOAD_UNIT = "connection"
"""Requests that can wait at once: one per connection (its episode opens with the request)."""
ACCEPTS_WHILE_LOADING = True
"""openpi's own client connects once and waits for the metadata: a handshake refused while the
policy loads would fail it, so the connection is taken and greeted once the policy is loaded."""


async def handle_connection(server: ServerCore, connection: Connection) -> None:
    """Greet with the server's metadata, then answer each observation with its actions."""
    await connection.ws.send(protocol.pack({**server.metadata, "protocol": "openpi"}))
    async for frame in connection.ws:
        await _frame(server, connection, frame)


async def _frame(server: ServerCore, connection: Connection, frame: bytes | str) -> None:
    try:
        arrays = connection.frame_arrays(server.config.max_message_bytes)
        obs = protocol.unpack(frame, arrays)
        connection.count_frame(arrays)
        if protocol.OPENPI_ATTACH in obs:
            request = obs[protocol.OPENPI_ATTACH] if isinstance(obs[protocol.OPENPI_ATTACH], dict) else {}
            connection.attach_segment(request.get("segment"), request.get("nonce"), server.metadata["shared_memory"])
            await connection.send(protocol.pack({"attached": request["segment"]}))
            return
        problem = protocol.observation_problem(obs, server.config.max_message_bytes)
        if problem is not None:
            raise protocol.ProtocolError(f"an observation must be {problem}")
        prompt = obs.get("prompt", obs.get("instruction", ""))
        info = EpisodeInfo(task="openpi", seed=0, instruction=str(prompt), episode_index=0, max_steps=1)
        outcome: Outcome | Refused = await server.serve_one_step(
            connection, info, {"instruction": info.instruction, **obs}
        )
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
        await connection.send("\n".join(filter(None, [str(outcome), protocol.remote_traceback(outcome)])))
    else:
        await connection.send(protocol.pack({"actions": outcome}))
