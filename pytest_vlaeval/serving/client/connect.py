"""A server's address to a connected policy: the client its scheme's transport names."""

from __future__ import annotations

from typing import Any

from pytest_vlaeval.serving.url import RemoteSpec


def connect_policy(remote: RemoteSpec, action_dim: int, benchmark: str = "") -> Any:
    """The policy behind a server's address, connected and checked (``RemoteSpec.factory``)."""
    return remote.factory(action_dim, benchmark)()
