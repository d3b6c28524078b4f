"""A policy server's address (``ws://``, ``openpi://``, ``vla-eval://HOST:PORT``) to a connected
policy: one client module per wire protocol, chosen here by scheme."""

from __future__ import annotations

from typing import Any

from pytest_vlaeval.serving.client import OpenpiPolicy, RemotePolicy
from pytest_vlaeval.serving.url import RemoteSpec
from pytest_vlaeval.serving.vla_eval_client import VlaEvalPolicy


def connect_policy(remote: RemoteSpec, action_dim: int, benchmark: str = "") -> Any:
    """The policy behind a ``ws://``, ``openpi://`` or ``vla-eval://`` spec, connected and checked."""
    if remote.scheme == "vla-eval":
        return VlaEvalPolicy(remote, action_dim, benchmark)
    return (RemotePolicy if remote.scheme == "ws" else OpenpiPolicy)(remote, action_dim)
