"""How a ``--policy`` spec becomes a policy: a built-in name, ``module:attr``, or a server's address.

A local policy (built-in or ``module:attr``) is built here; an address is handed to ``serving``,
which is imported only then. A server builds local policies only: it never proxies another server.
"""

from __future__ import annotations

from typing import Any

from pytest_vlaeval.errors import EpisodeError, PolicyError, SpecError
from pytest_vlaeval.importing import load_reference, split_reference
from pytest_vlaeval.policy.builtins import BUILTIN_POLICIES
from pytest_vlaeval.policy.contract import Policy, checked_policy


def is_remote(spec: str) -> bool:
    """Whether ``spec`` names a policy server (``ws://``, ``openpi://`` or ``vla-eval://HOST:PORT``)."""
    return "://" in spec


def local_reference(spec: str) -> tuple[str, str] | None:
    """``(module, attr)`` of a ``module:attr`` spec, None for a built-in; ``SpecError`` for anything else."""
    if spec in BUILTIN_POLICIES:
        return None
    if is_remote(spec):
        raise SpecError(
            f"--policy {spec!r} is a policy server's address; a server serves a local policy: "
            f"module:attr or one of {', '.join(BUILTIN_POLICIES)}"
        )
    reference = split_reference(spec)
    if reference is None:
        raise SpecError(f"--policy {spec!r}: expected module:attr or one of {', '.join(BUILTIN_POLICIES)}")
    return reference


def resolve_policy_factory(spec: str) -> Any:
    """Find the class or factory a local ``--policy`` spec names (imports the user's module)."""
    reference = local_reference(spec)
    if reference is None:
        return BUILTIN_POLICIES[spec]
    module_name, attr = reference
    try:
        factory = load_reference(module_name, attr)
    except ImportError as exc:
        raise SpecError(f"--policy {spec!r}: cannot import {module_name!r}: {exc}") from None
    except AttributeError:
        raise SpecError(f"--policy {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(factory):
        raise SpecError(f"--policy {spec!r}: {attr!r} is not a class or factory")
    return factory


def local_policy(spec: str, action_dim: int) -> Policy:
    """Instantiate the local policy a spec names and check it honours the contract."""
    try:
        factory = resolve_policy_factory(spec)
    except SpecError as exc:  # in a worker, a policy that cannot be found fails its episodes
        raise PolicyError(str(exc)) from None
    try:
        policy = factory(action_dim) if spec in BUILTIN_POLICIES else factory()
    except EpisodeError:
        raise  # the episode's deadline (or a server fault) interrupted it: not the factory's own fault
    except Exception as exc:
        raise PolicyError(f"policy factory {spec!r} raised {type(exc).__name__}: {exc}") from exc
    return checked_policy(policy, spec)


def build_policy(spec: str, action_dim: int, benchmark: str = "") -> Policy:
    """The policy a ``--policy`` spec names: a local one, or a client of the server it addresses."""
    if is_remote(spec):
        from pytest_vlaeval.serving.connect import connect_policy

        return connect_policy(spec, action_dim, benchmark)
    return local_policy(spec, action_dim)
