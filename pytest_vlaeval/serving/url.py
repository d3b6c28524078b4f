"""Remote policy specs: ``ws://host:port`` (this package's protocol), ``openpi://host:port`` and
``vla-eval://host:port`` (vla-eval's model-server protocol).

Kept free of network imports so the session can check a spec before any worker starts.
Options ride in the query string: ``timeout`` (seconds to wait for a reply, default 120),
``connect_timeout`` (seconds to keep retrying a connection, default 60), ``server_pid`` (the
server's process on this host, which ``--vla-serve`` adds so that a dead server fails fast) and,
for openpi and vla-eval, ``chunk_size`` (at most this many actions of a reply are executed). The token, if the server wants one, comes from
the ``VLAEVAL_SERVE_TOKEN`` environment variable, so it never lands in run names or logs. Any
scheme takes ``identity``: what the run records as its policy instead of the address, so a
server that comes back on another port (or ``evaluate``'s server for a policy object) continues
the same run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.serving.transports import BY_SCHEME, TRANSPORTS

TOKEN_ENV = "VLAEVAL_SERVE_TOKEN"
SERVED_URL_KEY = "vla_served_url"
"""xdist ``workerinput`` key: the address of the session's own server (``--vla-serve``)."""
_INTEGER_OPTIONS = ("chunk_size", "server_pid")
_TEXT_OPTIONS = ("identity",)
MAX_WAIT_S = 86_400
"""The longest ``timeout`` or ``connect_timeout``: a day is already no bound a person waits out."""
_MAX_VALUES = {"timeout": MAX_WAIT_S, "connect_timeout": MAX_WAIT_S, "chunk_size": 2**31 - 1, "server_pid": 2**31 - 1}
"""Each numeric option's largest value, so every option is a finite number the client can wait or count with."""


@dataclass(frozen=True)
class RemoteSpec:
    scheme: str
    host: str
    port: int
    timeout_s: float = 120.0
    connect_timeout_s: float = 60.0
    chunk_size: int | None = None
    server_pid: int | None = None
    """The server's process on this host (set by ``--vla-serve``): once it is gone, connecting fails at once."""
    text: str = field(default="", compare=False)
    """The spec as given."""
    named: str | None = None
    """``identity=``: the policy's name for the run, when the address is not it."""

    interpreter = None
    """A server is reached, never started: it runs in no interpreter of the session's."""

    @property
    def identity(self) -> str:
        """What the run's fingerprint and name record: the ``identity`` option, else the spec."""
        return self.named or self.text

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Any]:
        """The builder of a connected client of the server, its scheme's transport's (its module
        imported now), for actions of ``action_dim`` on the benchmark named ``benchmark`` (which
        vla-eval's protocol tells the server)."""
        client = BY_SCHEME[self.scheme].client_class()
        return lambda: client(self, action_dim, benchmark)

    @property
    def url(self) -> str:
        """The websocket address (openpi servers are plain websocket servers too)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    @property
    def on_loopback(self) -> bool:
        """Whether the server is on this machine's loopback (its clients may offer it shared memory)."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address, or ``localhost``."""
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def parse_remote_spec(spec: str) -> RemoteSpec:
    """Parse and check a remote policy spec; raises ``SpecError`` saying what is wrong."""
    *others, last = (transport.address for transport in TRANSPORTS)
    usage = f"--policy {spec!r}: expected {', '.join(others)} or {last}"
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError:  # a bad port, or an address urllib cannot split (an unclosed "[")
        raise SpecError(usage) from None
    if parts.scheme not in BY_SCHEME or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise SpecError(usage)
    options: dict[str, float] = {}
    named = None
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        known = (*BY_SCHEME[parts.scheme].url_options, *_TEXT_OPTIONS)
        if name not in known:
            raise SpecError(f"{usage}; unknown option {name!r} (known: {', '.join(known)})")
        if name in _TEXT_OPTIONS:
            if not text.strip():
                raise SpecError(f"{usage}; option {name} must not be empty")
            named = text
            continue
        options[name] = _number(usage, name, text)
    chunk_size = options.pop("chunk_size", None)
    server_pid = options.pop("server_pid", None)
    return RemoteSpec(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        timeout_s=options.get("timeout", RemoteSpec.timeout_s),
        connect_timeout_s=options.get("connect_timeout", RemoteSpec.connect_timeout_s),
        chunk_size=int(chunk_size) if chunk_size is not None else None,
        server_pid=int(server_pid) if server_pid is not None else None,
        text=spec,
        named=named,
    )


def _number(usage: str, name: str, text: str) -> float:
    """A numeric option's value: finite, positive, at most its ``_MAX_VALUES`` bound, whole where it counts."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    whole = name in _INTEGER_OPTIONS
    if not 0 < value <= _MAX_VALUES[name] or (whole and not value.is_integer()):  # NaN compares false: refused too
        kind = "whole number" if whole else "number"
        raise SpecError(f"{usage}; option {name} must be a positive {kind} up to {_MAX_VALUES[name]}, got {text!r}")
    return value


def served_url(url: str, pid: int) -> str:
    """The address a session hands its workers for its own server, which runs as process ``pid``."""
    return f"{url}?server_pid={pid}"
