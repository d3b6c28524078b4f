"""Policy serving: one model shared by many episodes over websockets, batched across episodes.

Imported only when a remote policy or ``--vla-serve`` is used, so plain pytest runs never load
``websockets`` or ``msgpack``. The names below are the public surface for code outside the
package (benchmark scripts, users' tools); each is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "connect_policy": "pytest_vlaeval.serving.client.connect",
    "ServerProcess": "pytest_vlaeval.serving.server.launcher",
    "from_wire_observation": "pytest_vlaeval.serving.wire.vla_eval",
    "parse_remote_spec": "pytest_vlaeval.serving.url",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
