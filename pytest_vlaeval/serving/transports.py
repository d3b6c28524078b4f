"""Every wire protocol, one entry each: its URL scheme, the options its addresses take, its
client and its server handler. The URL parser, the client dispatch (``connect``), the server
and ``vlaeval serve --protocol`` all derive from ``TRANSPORTS``.

A transport is one client module and one handler module (``handle_connection(core, connection)``,
``LOAD_UNIT`` and ``ACCEPTS_WHILE_LOADING``, written against ``core.ServerCore``) plus one line here. Clients and
handlers are named, not imported, so parsing an address loads no network code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytest_vlaeval.importing import load_reference, split_reference

_WAITS = ("timeout", "connect_timeout")


@dataclass(frozen=True)
class Transport:
    scheme: str
    """``--policy SCHEME://HOST:PORT``."""
    protocol: str
    """``vlaeval serve --protocol``."""
    url_options: tuple[str, ...]
    """Query-string options of its addresses (besides ``identity``, which every scheme takes)."""
    address: str
    """How its address is written, for error messages."""
    client: str
    """``module:Class`` of its client: ``Class(remote, action_dim, benchmark)`` honours the ``Policy`` contract."""
    handler: str
    """The module of its server handler."""

    def client_class(self) -> Any:
        return load_reference(*(split_reference(self.client) or ("", "")))

    def handler_module(self) -> ModuleType:
        return importlib.import_module(self.handler)


TRANSPORTS = (
    Transport(
        "ws",
        "vlaeval",
        (*_WAITS, "server_pid"),
        "ws://HOST:PORT",
        "pytest_vlaeval.serving.client.policies:RemotePolicy",
        "pytest_vlaeval.serving.server.native_handler",
    ),
    Transport(
        "openpi",
        "openpi",
        (*_WAITS, "chunk_size"),
        "openpi://HOST:PORT[?chunk_size=K]",
        "pytest_vlaeval.serving.client.policies:OpenpiPolicy",
        "pytest_vlaeval.serving.server.openpi_handler",
    ),
    Transport(
        "vla-eval",
        "vla-eval",
        (*_WAITS, "chunk_size"),
        "vla-eval://HOST:PORT",
        "pytest_vlaeval.serving.client.vla_eval:VlaEvalPolicy",
        "pytest_vlaeval.serving.server.vla_eval_handler",
    ),
)

BY_SCHEME = {transport.scheme: transport for transport in TRANSPORTS}
BY_PROTOCOL = {transport.protocol: transport for transport in TRANSPORTS}
PROTOCOLS = tuple(BY_PROTOCOL)
"""Wire protocols a server speaks (``--protocol``)."""
