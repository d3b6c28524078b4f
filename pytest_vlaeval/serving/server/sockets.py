"""The server's sockets, bounded from accept on, so that no burst of connections can take the
process's file descriptors.

asyncio accepts up to its listen backlog per turn of the event loop, before any protocol code
sees a socket: a bound checked after accept comes too late, and a burst runs the process out of
descriptors (``socket.accept() out of system resource``, a second without accepting). So the
listening socket itself (``Listener``) asks the gate at accept and closes a socket past the bound
there and then: the process never holds more than the bound plus ``ACCEPT_SLACK`` sockets.

When the server is full, a newcomer takes the place of the oldest socket that has not sent its
request within ``SILENT_GRACE_S``: clients that connect and never speak keep the others out for
that long, not for the whole handshake timeout.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from typing import Any

from websockets.asyncio.server import ServerConnection

log = logging.getLogger("pytest_vlaeval.serving")

SOCKETS_PER_CONNECTION = 2
"""Sockets held at most, per ``--max-connections``: room for a full house of connections and as
many again in their handshake or being told to come back (1013)."""
SILENT_GRACE_S = 1.0
"""How long a socket that has not sent its request keeps its place in a full server."""
ACCEPT_SLACK = 2
"""Sockets past the bound, for an instant: one whose place a newcomer took (closed on the loop's
next turn), and one just accepted to be closed at once."""
OWN_DESCRIPTORS = 64
"""Descriptors left to the process itself when its open-file limit bounds the sockets: the
interpreter and its libraries, the log, the policy's files and devices (a served model on a GPU
holds a few dozen)."""
LISTEN_BACKLOG = 100
"""Connections the kernel queues until accepted; also the most refused in one turn of the loop."""


def descriptors_needed(sockets: int) -> int:
    """The open-file limit (``ulimit -n``) under which holding ``sockets`` sockets never runs the
    process out of descriptors."""
    return sockets + ACCEPT_SLACK + OWN_DESCRIPTORS


def socket_bound(max_connections: int) -> int:
    """Twice ``max_connections``, or what the open-file limit leaves room for (said once, at start)."""
    wanted = SOCKETS_PER_CONNECTION * max_connections
    limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit == resource.RLIM_INFINITY or descriptors_needed(wanted) <= limit:
        return wanted
    room = max(limit - descriptors_needed(0), 1)
    log.warning(
        "the open-file limit (ulimit -n %d) leaves room for %d sockets, not %d x --max-connections %d: "
        "sockets past %d are closed at once; raise ulimit -n to %d or lower --max-connections to %d",
        limit,
        room,
        SOCKETS_PER_CONNECTION,
        max_connections,
        room,
        descriptors_needed(wanted),
        max(room // SOCKETS_PER_CONNECTION, 1),
    )
    return room


class SocketGate:
    """Counts every socket from accept until it is closed, and decides at accept whether it stays."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.open = 0
        self._silent: dict[ServerConnection, float] = {}
        """Sockets that may not have sent their request yet, oldest first, with when they came."""

    def admit(self, peer: Any) -> bool:
        """Whether a socket just accepted from ``peer`` may stay: below the bound, or in place of
        one that has been silent for ``SILENT_GRACE_S``."""
        if self.open < self.bound or (self.open == self.bound and self._close_oldest_silent()):
            self.open += 1
            return True
        log.warning("closed a socket from %s at once: the server holds its bound of %d sockets", peer, self.bound)
        return False

    def made(self, connection: ServerConnection) -> None:
        self._silent[connection] = time.monotonic()

    def lost(self, connection: ServerConnection) -> None:
        self.open -= 1
        self._silent.pop(connection, None)

    def _close_oldest_silent(self) -> bool:
        """Close the oldest socket silent for the grace; False when none has been."""
        came_before = time.monotonic() - SILENT_GRACE_S
        while self._silent:
            connection, came = next(iter(self._silent.items()))
            if connection.request is not None:
                del self._silent[connection]  # it spoke: never closed for silence
            elif came > came_before:
                return False  # the oldest is still within its grace, and so are all after it
            else:
                del self._silent[connection]
                log.warning(
                    "closed a socket from %s that sent no request in %g s, to make room for a new one",
                    connection.remote_address,
                    SILENT_GRACE_S,
                )
                connection.transport.abort()  # counted until it is closed, on the loop's next turn
                return True
        return False


class Listener(socket.socket):
    """A listening socket that keeps only what its gate admits; asyncio's server accepts through it."""

    def __init__(self, fileno: int, gate: SocketGate) -> None:
        super().__init__(fileno=fileno)
        self.gate = gate

    def accept(self) -> tuple[socket.socket, Any]:
        """The next socket the gate admits; ``BlockingIOError`` (the loop's cue to wait for the
        next turn) once none is queued or ``LISTEN_BACKLOG`` were refused in this call."""
        for _ in range(LISTEN_BACKLOG):
            conn, peer = super().accept()
            if self.gate.admit(peer):
                return conn, peer
            conn.close()
        raise BlockingIOError("refused a backlog's worth of sockets in one turn")


def listen(host: str, port: int, gate: SocketGate) -> Listener:
    """A listening socket on the first address ``host`` resolves to; raises ``OSError``."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    plain = socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)
    return Listener(plain.detach(), gate)


def counted_connections(gate: SocketGate) -> type[ServerConnection]:
    """websockets' server connection, telling ``gate`` when each socket is made and lost."""

    class CountedConnection(ServerConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            gate.made(self)

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            gate.lost(self)

    return CountedConnection
